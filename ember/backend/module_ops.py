"""Module ops of the backend protocol: convolution, pooling, embedding.

Every method has a default written over the primitive ops of :class:`Backend`
(slices, cat, reshape, matmul, where, scatter_add, select...), so that any backend
runs every layer unchanged; a backend with faster kernels overrides them (flex does).

Conventions, shared by all methods (the tensor layer checks them before calling):

* inputs are channels-first, ``[batch, channels, *spatial]``, with one or more
  spatial dims; every per-dim argument is a tuple with one entry per spatial dim;
* ``padding`` is a tuple of ``(before, after)`` pairs of non-negative ints, so
  asymmetric ("same") padding needs no extra copy;
* conv weights are ``[channels_out, channels_in / groups, *kernel]``; conv-transpose
  weights are ``[channels_in, channels_out / groups, *kernel]`` (Burn's and PyTorch's);
* max-pool indices are int64 flat positions into the (unpadded) spatial dims of the
  input, as in PyTorch.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ember.backend.dtype import DType
from ember.backend.ops import BinaryOp, ReduceOp, UnaryOp

Primitive = Any
Ints = tuple[int, ...]
Pairs = tuple[tuple[int, int], ...]


# ---------------------------------------------------------------------- output sizes
def conv_output_size(size: int, kernel: int, stride: int, pad: tuple[int, int], dilation: int) -> int:
    """The length of a conv's output along one dim (may be < 1 for a bad call)."""
    return (size + pad[0] + pad[1] - dilation * (kernel - 1) - 1) // stride + 1


def conv_transpose_output_size(
    size: int, kernel: int, stride: int, pad: tuple[int, int], output_padding: int, dilation: int
) -> int:
    """The length of a conv-transpose's output along one dim."""
    return (size - 1) * stride - pad[0] - pad[1] + dilation * (kernel - 1) + 1 + output_padding


def pool_output_size(size: int, kernel: int, stride: int, pad: tuple[int, int], dilation: int, ceil_mode: bool) -> int:
    """The length of a pooling output along one dim. With ``ceil_mode`` a last, partial
    window is kept if it starts inside the input or its leading padding (PyTorch's rule)."""
    span = size + pad[0] + pad[1] - dilation * (kernel - 1) - 1
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + pad[0]:
        out -= 1
    return out


def adaptive_pool_matrix(size: int, out: int) -> np.ndarray:
    """The ``[size, out]`` float64 matrix averaging PyTorch's adaptive windows
    ``[floor(i * size / out), ceil((i + 1) * size / out))``."""
    matrix = np.zeros((size, out))
    for i in range(out):
        start = (i * size) // out
        end = -(-((i + 1) * size) // out)
        matrix[start:end, i] = 1.0 / (end - start)
    return matrix


def window_counts(size: int, kernel: int, stride: int, pad: tuple[int, int], out: int, include_pad: bool) -> np.ndarray:
    """How many elements each of the ``out`` pooling windows covers along one dim:
    inside the input and its padding (``include_pad``), or inside the input only.
    Windows never count the overhang that ``ceil_mode`` adds past the padding; a
    window without any counted element divides by 1."""
    starts = np.arange(out) * stride
    lo, hi = (0, size + pad[0] + pad[1]) if include_pad else (pad[0], pad[0] + size)
    return np.maximum(np.minimum(starts + kernel, hi) - np.maximum(starts, lo), 1)


# ---------------------------------------------------------------------- primitive helpers
def _dtype(x: Primitive) -> DType:
    return DType.from_numpy(x.dtype)


def _full_slices(shape: Ints) -> list[tuple[int, int, int]]:
    return [(0, n, 1) for n in shape]


def _pad(b: Any, x: Primitive, padding: Pairs, value: float) -> Primitive:
    """``x`` with its trailing dims padded by ``padding`` pairs (negative entries crop)."""
    spatial = len(padding)
    lead = len(x.shape) - spatial
    if any(lo < 0 or hi < 0 for lo, hi in padding):
        crop = _full_slices(x.shape)
        for i, (lo, hi) in enumerate(padding):
            n = x.shape[lead + i]
            crop[lead + i] = (max(-lo, 0), n - max(-hi, 0), 1)
        x = b.slice(x, tuple(crop))
        padding = tuple((max(lo, 0), max(hi, 0)) for lo, hi in padding)
    if not any(lo or hi for lo, hi in padding):
        return x
    shape = list(x.shape)
    region = _full_slices(x.shape)
    for i, (lo, hi) in enumerate(padding):
        n = x.shape[lead + i]
        shape[lead + i] = n + lo + hi
        region[lead + i] = (lo, lo + n, 1)
    out = b.full(tuple(shape), value, _dtype(x))
    return b.slice_assign(out, tuple(region), x)


def _offsets(kernel: Ints) -> list[Ints]:
    return list(itertools.product(*(range(k) for k in kernel)))


def _window(b: Any, xp: Primitive, offset: Ints, stride: Ints, dilation: Ints, out: Ints) -> Primitive:
    """The ``[N, C, *out]`` values under kernel position ``offset`` of every window."""
    slices = _full_slices(xp.shape[:2])
    for o, s, d, n in zip(offset, stride, dilation, out):
        start = o * d
        slices.append((start, start + (n - 1) * s + 1, s))
    return b.slice(xp, tuple(slices))


def _im2col(b: Any, x: Primitive, kernel: Ints, stride: Ints, padding: Pairs, dilation: Ints, out: Ints) -> Primitive:
    """``[N, C, K, P]`` columns (``K`` kernel positions, ``P`` output positions)."""
    n, c = x.shape[:2]
    p = int(np.prod(out))
    xp = _pad(b, x, padding, 0)
    cols = [b.reshape(_window(b, xp, o, stride, dilation, out), (n, c, 1, p)) for o in _offsets(kernel)]
    return cols[0] if len(cols) == 1 else b.cat(cols, 2)


def _spread(b: Any, cols: Primitive, shape: Ints, kernel: Ints, stride: Ints, dilation: Ints, out: Ints) -> Primitive:
    """The adjoint of :func:`_window` over all kernel positions: sums ``cols``
    (``[N, C, K, *out]``) into a zero tensor of the padded input's ``shape``."""
    n, c = shape[:2]
    total = b.full(shape, 0, _dtype(cols))
    for k, offset in enumerate(_offsets(kernel)):
        spans = _full_slices(shape[:2])
        for o, s, d, m in zip(offset, stride, dilation, out):
            spans.append((o * d, o * d + (m - 1) * s + 1, s))
        region = tuple(spans)
        piece = b.slice(cols, ((0, n, 1), (0, c, 1), (k, k + 1, 1)) + tuple((0, m, 1) for m in out))
        piece = b.reshape(piece, (n, c) + out)
        total = b.slice_assign(total, region, b.binary(BinaryOp.ADD, b.slice(total, region), piece))
    return total


def _move_last(b: Any, x: Primitive, dim: int) -> tuple[Primitive, tuple[int, ...]]:
    rank = len(x.shape)
    axes = tuple(d for d in range(rank) if d != dim) + (dim,)
    return b.permute(x, axes), axes


def _inverse(axes: tuple[int, ...]) -> tuple[int, ...]:
    inverse = [0] * len(axes)
    for i, a in enumerate(axes):
        inverse[a] = i
    return tuple(inverse)


class ModuleOps:
    """Module ops with defaults over the primitive ops (see the module docstring)."""

    # ------------------------------------------------------------------ convolution
    def conv(
        self,
        x: Primitive,
        weight: Primitive,
        bias: Primitive | None,
        stride: Ints,
        padding: Pairs,
        dilation: Ints,
        groups: int,
    ) -> Primitive:
        """Cross-correlation of ``x`` ``[N, C_in, *in]`` with ``weight``
        ``[C_out, C_in / groups, *kernel]``, plus ``bias`` ``[C_out]``: ``[N, C_out, *out]``."""
        b: Any = self
        n = x.shape[0]
        c_out, cg = weight.shape[:2]
        kernel = tuple(weight.shape[2:])
        out = tuple(
            conv_output_size(s, k, st, p, d) for s, k, st, p, d in zip(x.shape[2:], kernel, stride, padding, dilation)
        )
        k_total = int(np.prod(kernel))
        p_total = int(np.prod(out))
        cols = _im2col(b, x, kernel, stride, padding, dilation, out)  # [N, C_in, K, P]
        cols = b.reshape(cols, (n, groups, cg * k_total, p_total))
        w = b.reshape(weight, (1, groups, c_out // groups, cg * k_total))
        y = b.reshape(b.matmul(w, cols), (n, c_out) + out)
        if bias is not None:
            y = b.binary(BinaryOp.ADD, y, b.reshape(bias, (1, c_out) + (1,) * len(out)))
        return y

    def conv_transpose(
        self,
        x: Primitive,
        weight: Primitive,
        bias: Primitive | None,
        stride: Ints,
        padding: Pairs,
        output_padding: Ints,
        dilation: Ints,
        groups: int,
    ) -> Primitive:
        """The transpose (adjoint in ``x``) of :meth:`conv`: ``x`` ``[N, C_in, *in]``,
        ``weight`` ``[C_in, C_out / groups, *kernel]``; ``output_padding`` extends the
        output at the end of each dim. Output length per dim:
        ``(in - 1) * stride - before - after + dilation * (kernel - 1) + 1 + output_padding``."""
        b: Any = self
        n, c_in = x.shape[:2]
        og = weight.shape[1]
        kernel = tuple(weight.shape[2:])
        spatial = x.shape[2:]
        rank = len(kernel)
        # The windows' contributions, one kernel position at a time: cols = W^T x.
        k_total = int(np.prod(kernel))
        ig = c_in // groups
        w = b.reshape(weight, (groups, ig, og * k_total))
        w = b.permute(w, (0, 2, 1))  # [G, Og * K, Ig]
        xs = b.reshape(x, (n, groups, ig, int(np.prod(spatial))))
        cols = b.matmul(b.reshape(w, (1, groups, og * k_total, ig)), xs)  # [N, G, Og*K, P]
        cols = b.reshape(cols, (n, groups * og, k_total) + spatial)
        full = tuple((m - 1) * s + d * (k - 1) + 1 for m, s, d, k in zip(spatial, stride, dilation, kernel))
        y = _spread(b, cols, (n, groups * og) + full, kernel, stride, dilation, spatial)
        crop = tuple((-lo, -(hi - op)) for (lo, hi), op in zip(padding, output_padding))
        y = _pad(b, y, crop, 0)
        if bias is not None:
            y = b.binary(BinaryOp.ADD, y, b.reshape(bias, (1, groups * og) + (1,) * rank))
        return y

    def conv_weight_grad(
        self,
        x: Primitive,
        grad: Primitive,
        weight_shape: Ints,
        stride: Ints,
        padding: Pairs,
        dilation: Ints,
        groups: int,
    ) -> Primitive:
        """The gradient of :meth:`conv` with respect to its weight, given the input
        ``x`` and the output gradient ``grad`` ``[N, C_out, *out]``."""
        b: Any = self
        n = x.shape[0]
        c_out, cg = weight_shape[:2]
        kernel = tuple(weight_shape[2:])
        out = tuple(grad.shape[2:])
        k_total = int(np.prod(kernel))
        p_total = int(np.prod(out))
        cols = b.reshape(_im2col(b, x, kernel, stride, padding, dilation, out), (n, groups, cg * k_total, p_total))
        g = b.reshape(grad, (n, groups, c_out // groups, p_total))
        gw = b.matmul(g, b.permute(cols, (0, 1, 3, 2)))  # [N, G, Og, Cg * K]
        gw = b.reduce(ReduceOp.SUM, gw, 0)
        return b.reshape(gw, tuple(weight_shape))

    # ------------------------------------------------------------------ max pooling
    def max_pool(
        self, x: Primitive, kernel: Ints, stride: Ints, padding: Pairs, dilation: Ints, ceil_mode: bool
    ) -> Primitive:
        """The maximum of each window of ``x`` ``[N, C, *in]`` (padding never wins)."""
        return self.max_pool_with_indices(x, kernel, stride, padding, dilation, ceil_mode)[0]

    def max_pool_with_indices(
        self, x: Primitive, kernel: Ints, stride: Ints, padding: Pairs, dilation: Ints, ceil_mode: bool
    ) -> tuple[Primitive, Primitive]:
        """:meth:`max_pool` and the int64 flat spatial index of each maximum (the first
        one on ties; NaN wins, as in PyTorch)."""
        b: Any = self
        spatial = tuple(x.shape[2:])
        out = tuple(
            pool_output_size(s, k, st, p, d, ceil_mode)
            for s, k, st, p, d in zip(spatial, kernel, stride, padding, dilation)
        )
        xp = _pad(b, x, _ceil_padding(spatial, kernel, stride, padding, dilation, out), float("-inf"))
        best = best_idx = None
        for offset in _offsets(kernel):
            value = _window(b, xp, offset, stride, dilation, out)
            idx = b.from_numpy(_flat_positions(spatial, offset, stride, padding, dilation, out))
            if best is None:
                best, best_idx = value, b.expand(idx, value.shape)
                continue
            take = b.binary(BinaryOp.LOGICAL_OR, b.binary(BinaryOp.GT, value, best), b.unary(UnaryOp.IS_NAN, value))
            best = b.where(take, value, best)
            best_idx = b.where(take, idx, best_idx)
        return best, best_idx

    def max_pool_backward(self, grad: Primitive, indices: Primitive, input_shape: Ints) -> Primitive:
        """The gradient of :meth:`max_pool` with respect to its input: each output's
        gradient added at the position its ``indices`` name."""
        b: Any = self
        n, c = input_shape[:2]
        size = int(np.prod(input_shape[2:]))
        g = b.reshape(grad, (n, c, -1))
        idx = b.reshape(indices, (n, c, g.shape[2]))
        zeros = b.full((n, c, size), 0, _dtype(grad))
        return b.reshape(b.scatter_add(zeros, 2, idx, g), tuple(input_shape))

    # ------------------------------------------------------------------ average pooling
    def avg_pool(
        self, x: Primitive, kernel: Ints, stride: Ints, padding: Pairs, count_include_pad: bool, ceil_mode: bool
    ) -> Primitive:
        """The mean of each window of ``x``; the divisor counts padded positions when
        ``count_include_pad`` (never the overhang of ``ceil_mode``)."""
        b: Any = self
        spatial = tuple(x.shape[2:])
        ones = (1,) * len(kernel)
        out = tuple(
            pool_output_size(s, k, st, p, 1, ceil_mode) for s, k, st, p in zip(spatial, kernel, stride, padding)
        )
        xp = _pad(b, x, _ceil_padding(spatial, kernel, stride, padding, ones, out), 0)
        total = None
        for offset in _offsets(kernel):
            value = _window(b, xp, offset, stride, ones, out)
            total = value if total is None else b.binary(BinaryOp.ADD, total, value)
        divisor = _divisor(spatial, kernel, stride, padding, out, count_include_pad, x.dtype)
        return b.binary(BinaryOp.DIV, total, b.from_numpy(divisor))

    def avg_pool_backward(
        self,
        grad: Primitive,
        input_shape: Ints,
        kernel: Ints,
        stride: Ints,
        padding: Pairs,
        count_include_pad: bool,
        ceil_mode: bool,
    ) -> Primitive:
        """The gradient of :meth:`avg_pool` with respect to its input."""
        b: Any = self
        spatial = tuple(input_shape[2:])
        ones = (1,) * len(kernel)
        out = tuple(grad.shape[2:])
        divisor = _divisor(spatial, kernel, stride, padding, out, count_include_pad, grad.dtype)
        g = b.binary(BinaryOp.DIV, grad, b.from_numpy(divisor))
        n, c = input_shape[:2]
        k_total = int(np.prod(kernel))
        cols = b.expand(b.reshape(g, (n, c, 1) + out), (n, c, k_total) + out)
        pads = _ceil_padding(spatial, kernel, stride, padding, ones, out)
        padded = tuple(s + lo + hi for s, (lo, hi) in zip(spatial, pads))
        total = _spread(b, cols, (n, c) + padded, kernel, stride, ones, out)
        return _pad(b, total, tuple((-lo, -hi) for lo, hi in pads), 0)

    # ------------------------------------------------------------------ adaptive pooling
    def adaptive_avg_pool(self, x: Primitive, output_size: Ints) -> Primitive:
        """Average pooling to ``output_size`` with PyTorch's adaptive windows; separable,
        so one small matmul per spatial dim."""
        b: Any = self
        for i, out in enumerate(output_size):
            dim = 2 + i
            matrix = b.from_numpy(adaptive_pool_matrix(x.shape[dim], out).astype(x.dtype))
            moved, axes = _move_last(b, x, dim)
            x = b.permute(b.matmul(moved, matrix), _inverse(axes))
        return x

    def adaptive_avg_pool_backward(self, grad: Primitive, input_shape: Ints) -> Primitive:
        """The gradient of :meth:`adaptive_avg_pool` with respect to its input."""
        b: Any = self
        for i, size in enumerate(input_shape[2:]):
            dim = 2 + i
            matrix = b.from_numpy(
                np.ascontiguousarray(adaptive_pool_matrix(size, grad.shape[dim]).T).astype(grad.dtype)
            )
            moved, axes = _move_last(b, grad, dim)
            grad = b.permute(b.matmul(moved, matrix), _inverse(axes))
        return grad

    # ------------------------------------------------------------------ embedding
    def embedding(self, weights: Primitive, indices: Primitive) -> Primitive:
        """Rows of ``weights`` ``[n, d]`` at int64 ``indices`` (any shape): ``[*indices, d]``."""
        b: Any = self
        d = weights.shape[1]
        rows = b.select(weights, 0, b.reshape(indices, (-1,)) if len(indices.shape) != 1 else indices)
        return b.reshape(rows, tuple(indices.shape) + (d,))

    def embedding_backward(self, grad: Primitive, indices: Primitive, num_embeddings: int) -> Primitive:
        """The gradient of :meth:`embedding` with respect to the weights (repeated
        indices accumulate)."""
        b: Any = self
        d = grad.shape[-1]
        flat = b.reshape(indices, (-1,)) if len(indices.shape) != 1 else indices
        zeros = b.full((num_embeddings, d), 0, _dtype(grad))
        return b.select_add(zeros, 0, flat, b.reshape(grad, (-1, d)))


def _ceil_padding(spatial: Ints, kernel: Ints, stride: Ints, padding: Pairs, dilation: Ints, out: Ints) -> Pairs:
    """``padding`` with the trailing overhang that ``ceil_mode`` windows reach."""
    pads = []
    for s, k, st, (lo, hi), d, o in zip(spatial, kernel, stride, padding, dilation, out):
        need = (o - 1) * st + d * (k - 1) + 1
        pads.append((lo, max(hi, need - s - lo)))
    return tuple(pads)


def _flat_positions(spatial: Ints, offset: Ints, stride: Ints, padding: Pairs, dilation: Ints, out: Ints) -> np.ndarray:
    """int64 ``[*out]``: the flat input position under kernel ``offset`` of each window
    (clipped into the input for windows that sit on padding there)."""
    flat = np.zeros(out, dtype=np.int64)
    step = 1
    for axis in range(len(spatial) - 1, -1, -1):
        pos = np.arange(out[axis]) * stride[axis] + offset[axis] * dilation[axis] - padding[axis][0]
        pos = np.clip(pos, 0, spatial[axis] - 1)
        shape = [1] * len(spatial)
        shape[axis] = out[axis]
        flat = flat + pos.reshape(shape) * step
        step *= spatial[axis]
    return flat


def _divisor(
    spatial: Ints, kernel: Ints, stride: Ints, padding: Pairs, out: Ints, include_pad: bool, dtype: Any
) -> np.ndarray:
    """The ``[*out]`` element counts of the average-pooling windows."""
    total = np.ones((), dtype=np.float64)
    for axis, (s, k, st, p, o) in enumerate(zip(spatial, kernel, stride, padding, out)):
        counts = window_counts(s, k, st, p, o, include_pad).astype(np.float64)
        shape = [1] * len(spatial)
        shape[axis] = o
        total = total * counts.reshape(shape)
    return np.ascontiguousarray(np.broadcast_to(total, out)).astype(dtype)
