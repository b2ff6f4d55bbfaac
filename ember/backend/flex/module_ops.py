"""flex's module ops: convolution by im2col plus one matmul, vectorised pooling.

float32 stride-1 convolutions with small windows, forward, transposed and their weight
gradients, run the direct kernels instead where compiled plans run them
(:mod:`.native_direct`: hosts with 512-bit vectors by default), so eager and compiled
code convolve them alike.

Windows are strided views of the padded input (``as_strided``); one copy makes
them contiguous columns ``[C * K, N * P]`` and one matmul per group (not one per
sample, which stalls a multi-threaded BLAS on a busy machine) does the arithmetic.
Stride-1 convolutions gather on the padded grid (see :func:`_grid_columns`), which
copies long contiguous runs. Conv-transpose (a convolution's input gradient) is
col2im: one matmul, then the kernel layer's col2im (:mod:`.native_conv`: each pixel
summed once over the columns that reach it, the bias added, straight into the
result) or, for small or half-precision arrays, a sum over the kernel positions in
numpy, in the same order. Max-pooling (forward and backward) runs the kernel layer's loop
nest, the one compiled code runs (:mod:`.native_pool`), for float arrays of
:data:`~ember.backend.flex.native.MIN_ELEMENTS` or more; smaller ones (or with the
native kernels off) take a branch-free running maximum over the kernel positions in
numpy, with the same result. No Python loop runs over the batch or the pixels, only over kernel
positions. float16/bfloat16 are computed in float32 and rounded back.

Temporaries (padded inputs, columns, matmul results) live in per-thread scratch
buffers that are reused from call to call: a fresh multi-megabyte array costs a
page fault per 4 KiB page when the allocator has returned the memory to the OS
between training steps, which can cost more than the arithmetic.
"""

from __future__ import annotations

import itertools
import threading

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ember.backend.flex import native_conv, native_direct, native_pool
from ember.backend.flex.quiet import quietly
from ember.backend.module_ops import (
    Ints,
    ModuleOps,
    Pairs,
    adaptive_pool_matrix,
    conv_output_size,
    pool_output_size,
    window_counts,
)
from ember.errors import IndexOutOfBoundsError

_F32 = np.dtype(np.float32)
_FLOATS = frozenset({np.dtype(np.float32), np.dtype(np.float64)})


_SCRATCH = threading.local()
_SCRATCH_LIMIT = 64 * 2**20  # bytes per buffer; larger temporaries are allocated fresh


def scratch(role: str, shape: tuple[int, ...], dtype, fill: float | None = None) -> np.ndarray:
    """An uninitialised (or ``fill``-ed) array for a temporary that never leaves the op:
    one reusable buffer per thread and ``role``, grown to the largest size asked."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    if nbytes > _SCRATCH_LIMIT:
        return np.empty(shape, dtype) if fill is None else np.full(shape, fill, dtype)
    buffers = getattr(_SCRATCH, "buffers", None)
    if buffers is None:
        buffers = _SCRATCH.buffers = {}
    buffer = buffers.get(role)
    if buffer is None or buffer.nbytes < nbytes:
        buffer = buffers[role] = np.empty(max(nbytes, 1), dtype=np.uint8)
    out = buffer[:nbytes].view(dtype).reshape(shape)
    if fill is not None:
        out.fill(fill)
    return out


def _work(x: np.ndarray) -> np.ndarray:
    """``x`` in a dtype numpy computes well (float32 for the half types)."""
    return x if x.dtype in _FLOATS else x.astype(_F32)


def _padded(x: np.ndarray, padding: Pairs, value: float, role: str | None = None) -> np.ndarray:
    """``x`` with its trailing dims padded by ``padding`` pairs (negative ones crop);
    in the scratch buffer ``role`` when given (for a temporary)."""
    lead = x.ndim - len(padding)
    if any(lo < 0 or hi < 0 for lo, hi in padding):
        crop = [slice(None)] * lead + [
            slice(max(-lo, 0), n - max(-hi, 0)) for (lo, hi), n in zip(padding, x.shape[lead:])
        ]
        x = x[tuple(crop)]
        padding = tuple((max(lo, 0), max(hi, 0)) for lo, hi in padding)
    if not any(lo or hi for lo, hi in padding):
        return x
    shape = x.shape[:lead] + tuple(n + lo + hi for n, (lo, hi) in zip(x.shape[lead:], padding))
    out = np.full(shape, value, dtype=x.dtype) if role is None else scratch(role, shape, x.dtype, value)
    out[(slice(None),) * lead + tuple(slice(lo, lo + n) for n, (lo, _) in zip(x.shape[lead:], padding))] = x
    return out


def _windows(
    xp: np.ndarray, kernel: Ints, stride: Ints, dilation: Ints, out: Ints, kernel_first: bool, writeable: bool = False
) -> np.ndarray:
    """A strided view of the windows of the padded ``xp`` ``[N, C, *spatial]``:
    ``[N, C, *kernel, *out]`` when ``kernel_first``, else ``[N, C, *out, *kernel]``.
    ``writeable`` only for a fresh buffer that is accumulated into one kernel
    position at a time (positions of one kernel offset never overlap)."""
    sn, sc, *ss = xp.strides
    k_strides = tuple(d * s for d, s in zip(dilation, ss))
    o_strides = tuple(st * s for st, s in zip(stride, ss))
    if kernel_first:
        shape, strides = xp.shape[:2] + tuple(kernel) + tuple(out), (sn, sc) + k_strides + o_strides
    else:
        shape, strides = xp.shape[:2] + tuple(out) + tuple(kernel), (sn, sc) + o_strides + k_strides
    return as_strided(xp, shape, strides, writeable=writeable)


def _ceil_pads(spatial: Ints, kernel: Ints, stride: Ints, padding: Pairs, dilation: Ints, out: Ints) -> Pairs:
    """``padding`` with the trailing overhang that ``ceil_mode`` windows reach."""
    return tuple(
        (lo, max(hi, (o - 1) * st + d * (k - 1) + 1 - s - lo))
        for s, k, st, (lo, hi), d, o in zip(spatial, kernel, stride, padding, dilation, out)
    )


def _pool_columns(x, kernel, stride, padding, dilation, ceil_mode) -> tuple[np.ndarray, Ints]:
    """The windows of ``x`` (padded with -inf) as contiguous ``[K, N * C * prod(out)]``."""
    spatial = x.shape[2:]
    out = tuple(pool_output_size(*a, ceil_mode) for a in zip(spatial, kernel, stride, padding, dilation))
    xp = _padded(x, _ceil_pads(spatial, kernel, stride, padding, dilation, out), -np.inf, "pool_pad")
    sn, sc, *ss = xp.strides
    view = as_strided(
        xp,
        tuple(kernel) + xp.shape[:2] + out,
        tuple(d * s for d, s in zip(dilation, ss)) + (sn, sc) + tuple(st * s for st, s in zip(stride, ss)),
        writeable=False,
    )
    cols = scratch("pool_cols", view.shape, view.dtype)
    np.copyto(cols, view)
    return cols.reshape(int(np.prod(kernel)), -1), out


def _flat_positions(local, spatial, kernel, stride, padding, dilation, out, clip: bool) -> np.ndarray:
    """int64 ``[N * C, *out]`` flat input positions of the kernel positions ``local``.
    With ``clip`` (only needed when a window's maximum is -inf, so padding may have
    won the tie) each coordinate is clipped into the input, which names the window's
    first real element, as PyTorch does."""
    rank = len(spatial)
    steps = [int(np.prod(spatial[i + 1 :])) for i in range(rank)]
    grid = local.reshape((-1,) + out)
    if not clip:
        # flat = base(window) + table(kernel position)
        base = np.zeros(out, dtype=np.int64)
        table = np.zeros(kernel, dtype=np.int64)
        for axis in range(rank):
            shape = [1] * rank
            shape[axis] = out[axis]
            base = base + ((np.arange(out[axis]) * stride[axis] - padding[axis][0]) * steps[axis]).reshape(shape)
            shape = [1] * rank
            shape[axis] = kernel[axis]
            table = table + (np.arange(kernel[axis]) * dilation[axis] * steps[axis]).reshape(shape)
        flat = np.take(table.reshape(-1), grid) + base
    else:
        flat = np.zeros(grid.shape, dtype=np.int64)
        rest = grid.astype(np.int64)
        for axis in range(rank - 1, -1, -1):
            offset, rest = rest % kernel[axis], rest // kernel[axis]
            shape = [1] * (rank + 1)
            shape[1 + axis] = out[axis]
            start = (np.arange(out[axis], dtype=np.int64) * stride[axis] - padding[axis][0]).reshape(shape)
            flat += np.clip(start + offset * dilation[axis], 0, spatial[axis] - 1) * steps[axis]
    return flat


def _divisor(
    spatial: Ints, kernel: Ints, stride: Ints, padding: Pairs, out: Ints, include_pad: bool, dtype
) -> np.ndarray:
    total = np.ones((), dtype=np.float64)
    rank = len(spatial)
    for axis in range(rank):
        counts = window_counts(spatial[axis], kernel[axis], stride[axis], padding[axis], out[axis], include_pad)
        shape = [1] * rank
        shape[axis] = out[axis]
        total = total * counts.astype(np.float64).reshape(shape)
    return total.astype(dtype)


class FlexModuleOps(ModuleOps):
    """numpy kernels for the module ops (see the module docstring)."""

    # ------------------------------------------------------------------ convolution
    @quietly
    def conv(self, x, weight, bias, stride, padding, dilation, groups):
        dtype = x.dtype
        y = _conv(_work(x), _work(weight), None if bias is None else _work(bias), stride, padding, dilation, groups)
        return y if y.dtype == dtype else y.astype(dtype)

    @quietly
    def conv_transpose(self, x, weight, bias, stride, padding, output_padding, dilation, groups):
        dtype = x.dtype
        y = _conv_transpose(
            _work(x),
            _work(weight),
            None if bias is None else _work(bias),
            stride,
            padding,
            output_padding,
            dilation,
            groups,
        )
        return y if y.dtype == dtype else y.astype(dtype)

    @quietly
    def conv_weight_grad(self, x, grad, weight_shape, stride, padding, dilation, groups):
        dtype = grad.dtype
        gw = _conv_weight_grad(_work(x), _work(grad), tuple(weight_shape), stride, padding, dilation, groups)
        return gw if gw.dtype == dtype else gw.astype(dtype)

    # ------------------------------------------------------------------ max pooling
    @quietly
    def max_pool(self, x, kernel, stride, padding, dilation, ceil_mode):
        dtype = x.dtype
        native = _native_pool(_work(x), kernel, stride, padding, dilation, ceil_mode, with_indices=False)
        if native is not None:
            y = native[0]
            return y if y.dtype == dtype else y.astype(dtype)
        cols, out = _pool_columns(_work(x), kernel, stride, padding, dilation, ceil_mode)
        y = np.maximum.reduce(cols, axis=0).reshape(x.shape[:2] + out)  # NaN propagates, as in PyTorch
        return y if y.dtype == dtype else y.astype(dtype)

    @quietly
    def max_pool_with_indices(self, x, kernel, stride, padding, dilation, ceil_mode):
        dtype = x.dtype
        native = _native_pool(_work(x), kernel, stride, padding, dilation, ceil_mode, with_indices=True)
        if native is not None:
            values, indices = native
            return (values if values.dtype == dtype else values.astype(dtype)), indices
        spatial = x.shape[2:]
        cols, out = _pool_columns(_work(x), kernel, stride, padding, dilation, ceil_mode)
        k_total = cols.shape[0]
        # A branch-free running maximum: the first maximum wins ties, a NaN wins always.
        best = cols[0].copy()
        local = scratch("pool_local", best.shape, np.int16 if k_total < 2**15 else np.int64, 0)
        take = scratch("pool_take", best.shape, bool)
        step = scratch("pool_step", best.shape, local.dtype)
        for k in range(1, k_total):
            value = cols[k]
            np.greater(value, best, out=take)
            take |= np.isnan(value)
            np.maximum(best, value, out=best)
            np.multiply(take, local.dtype.type(k), out=step)
            np.maximum(local, step, out=local)
        flat = _flat_positions(
            local, spatial, kernel, stride, padding, dilation, out, clip=bool(np.isneginf(best).any())
        )
        flat = flat.reshape(x.shape[:2] + out)
        best = best.reshape(x.shape[:2] + out)
        return (best if best.dtype == dtype else best.astype(dtype)), flat

    def max_pool_backward(self, grad, indices, input_shape):
        n, c = input_shape[:2]
        size = int(np.prod(input_shape[2:]))
        _check_plane_indices(indices, size)
        g = _work(grad)
        native = native_pool.max_pool_backward(g, indices, tuple(input_shape))
        if native is not None:
            return native.astype(grad.dtype, copy=False)
        rows = n * c
        idx = indices.reshape(rows, -1) + (np.arange(rows, dtype=np.int64) * size)[:, None]
        total = np.zeros(rows * size, dtype=g.dtype)
        np.add.at(total, idx.reshape(-1), g.reshape(-1))
        return total.astype(grad.dtype, copy=False).reshape(input_shape)

    # ------------------------------------------------------------------ average pooling
    @quietly
    def avg_pool(self, x, kernel, stride, padding, count_include_pad, ceil_mode):
        dtype = x.dtype
        xw = _work(x)
        spatial = x.shape[2:]
        ones = (1,) * len(kernel)
        out = tuple(
            pool_output_size(s, k, st, p, 1, ceil_mode) for s, k, st, p in zip(spatial, kernel, stride, padding)
        )
        xp = _padded(xw, _ceil_pads(spatial, kernel, stride, padding, ones, out), 0.0)
        view = _windows(xp, kernel, stride, ones, out, kernel_first=True)
        total = None
        for offset in itertools.product(*(range(k) for k in kernel)):
            piece = view[(slice(None), slice(None)) + offset]
            total = piece.copy() if total is None else np.add(total, piece, out=total)
        total /= _divisor(spatial, kernel, stride, padding, out, count_include_pad, total.dtype)
        return total if total.dtype == dtype else total.astype(dtype)

    def avg_pool_backward(self, grad, input_shape, kernel, stride, padding, count_include_pad, ceil_mode):
        dtype = grad.dtype
        spatial = tuple(input_shape[2:])
        ones = (1,) * len(kernel)
        out = tuple(grad.shape[2:])
        g = _work(grad) / _divisor(spatial, kernel, stride, padding, out, count_include_pad, _work(grad).dtype)
        pads = _ceil_pads(spatial, kernel, stride, padding, ones, out)
        padded = tuple(s + lo + hi for s, (lo, hi) in zip(spatial, pads))
        total = scratch("avg_total", tuple(input_shape[:2]) + padded, g.dtype, 0)
        view = _windows(total, kernel, stride, ones, out, kernel_first=True, writeable=True)
        for offset in itertools.product(*(range(k) for k in kernel)):
            piece = view[(slice(None), slice(None)) + offset]
            piece += g
        result = _padded(total, tuple((-lo, -hi) for lo, hi in pads), 0.0)
        return np.array(result, dtype=dtype, order="C", copy=True)  # never the scratch buffer itself

    # ------------------------------------------------------------------ adaptive pooling
    def adaptive_avg_pool(self, x, output_size):
        dtype = x.dtype
        y = _work(x)
        spatial = x.shape[2:]
        if all(s % o == 0 for s, o in zip(spatial, output_size)):
            # Equal windows: a reshape and a mean.
            shape = x.shape[:2]
            for s, o in zip(spatial, output_size):
                shape += (o, s // o)
            y = y.reshape(shape).mean(axis=tuple(range(3, 2 + 2 * len(spatial), 2)))
        else:
            for i, o in enumerate(output_size):
                y = np.moveaxis(
                    np.moveaxis(y, 2 + i, -1) @ adaptive_pool_matrix(spatial[i], o).astype(y.dtype), -1, 2 + i
                )
            y = np.ascontiguousarray(y)
        return y if y.dtype == dtype else y.astype(dtype)

    def adaptive_avg_pool_backward(self, grad, input_shape):
        dtype = grad.dtype
        g = _work(grad)
        for i, size in enumerate(input_shape[2:]):
            matrix = adaptive_pool_matrix(size, grad.shape[2 + i]).T.astype(g.dtype)
            g = np.moveaxis(np.moveaxis(g, 2 + i, -1) @ matrix, -1, 2 + i)
        return np.ascontiguousarray(g, dtype=dtype)

    # ------------------------------------------------------------------ embedding
    def embedding(self, weights, indices):
        _check_rows("embedding", indices, weights.shape[0])
        return np.take(weights, indices, axis=0)

    def embedding_backward(self, grad, indices, num_embeddings):
        d = grad.shape[-1]
        flat = indices.reshape(-1)
        g = _work(grad).reshape(-1, d)
        out = np.zeros((num_embeddings, d), dtype=g.dtype)
        np.add.at(out, flat, g)
        return out if out.dtype == grad.dtype else out.astype(grad.dtype)


def _native_pool(x, kernel, stride, padding, dilation, ceil_mode, with_indices: bool):
    """The kernel layer's max pooling (:mod:`.native_pool`), or ``None`` where it does not apply."""
    out = tuple(pool_output_size(*a, ceil_mode) for a in zip(x.shape[2:], kernel, stride, padding, dilation))
    return native_pool.max_pool(x, kernel, stride, padding, dilation, out, with_indices)


def _check_plane_indices(indices: np.ndarray, size: int) -> None:
    if indices.size and (indices.min() < 0 or indices.max() >= size):
        bad = indices[(indices < 0) | (indices >= size)].reshape(-1)[0]
        raise IndexOutOfBoundsError(
            f"ember: max_pool_backward: index {int(bad)} is out of bounds for a plane of size {size} "
            "(pass the indices max_pool_with_indices returned for an input of this shape)"
        )


def _check_rows(op: str, indices: np.ndarray, size: int) -> None:
    if indices.size and (indices.min() < 0 or indices.max() >= size):
        bad = indices[(indices < 0) | (indices >= size)].reshape(-1)[0]
        raise IndexOutOfBoundsError(
            f"ember: {op}: index {int(bad)} is out of bounds for {size} embeddings (indices must lie in [0, {size}))"
        )


# ---------------------------------------------------------------------- kernels
def _columns(xp, kernel, stride, dilation, out) -> np.ndarray:
    """im2col: the windows of the padded ``xp`` as one contiguous ``[C, *kernel, N, *out]``
    array, so that a single matmul (not one per sample) does a convolution."""
    rank = len(kernel)
    view = _windows(xp, kernel, stride, dilation, out, kernel_first=True)  # [N, C, *k, *out]
    axes = (1,) + tuple(range(2, 2 + rank)) + (0,) + tuple(range(2 + rank, 2 + 2 * rank))
    view = view.transpose(axes)
    cols = scratch("cols", view.shape, view.dtype)
    np.copyto(cols, view)
    return cols


def _grid_columns(xp, kernel, dilation) -> tuple[np.ndarray, Ints, tuple[int, ...], int]:
    """Stride-1 im2col "on the padded grid": output position ``o`` is the flat position
    ``q = sum(o_i * step_i)`` of the padded input, so each kernel position reads one
    contiguous run of ``length`` elements per (channel, sample). The copy is several
    times faster than gathering short rows; the columns between rows (``q`` whose
    last coordinate passes the output) are computed and dropped.

    Returns ``[C, *kernel, N, length]`` columns, the output size, the flat steps of
    the padded dims and ``length``."""
    if not xp.flags.c_contiguous:
        contiguous = scratch("grid_input", xp.shape, xp.dtype)
        np.copyto(contiguous, xp)
        xp = contiguous
    n, c = xp.shape[:2]
    padded = xp.shape[2:]
    rank = len(padded)
    steps = tuple(int(np.prod(padded[i + 1 :])) for i in range(rank))
    out = tuple(p - d * (k - 1) for p, k, d in zip(padded, kernel, dilation))
    length = sum((o - 1) * st for o, st in zip(out, steps)) + 1
    item = xp.itemsize
    view = as_strided(
        xp,
        (c,) + tuple(kernel) + (n, length),
        (xp.strides[1],) + tuple(d * st * item for d, st in zip(dilation, steps)) + (xp.strides[0], item),
        writeable=False,
    )
    cols = scratch("cols", view.shape, view.dtype)
    np.copyto(cols, view)
    return cols, out, steps, length


def _grid_view(y: np.ndarray, n: int, o: int, out: Ints, steps: tuple[int, ...], length: int) -> np.ndarray:
    """The ``[N, O, *out]`` outputs inside a contiguous ``[O, N, length]`` grid result."""
    item = y.itemsize
    return as_strided(
        y,
        (n, o) + out,
        (length * item, n * length * item) + tuple(st * item for st in steps),
        writeable=y.flags.writeable,
    )


def _conv(x, weight, bias, stride, padding, dilation, groups):
    n = x.shape[0]
    o, cg = weight.shape[:2]
    kernel = weight.shape[2:]
    k_total = int(np.prod(kernel))
    w = weight.reshape(groups, o // groups, cg * k_total)
    dtype = np.result_type(x, weight)
    out = tuple(conv_output_size(*a) for a in zip(x.shape[2:], kernel, stride, padding, dilation))
    if all(st == 1 for st in stride):  # small windows: the direct kernel compiled plans run
        direct = native_direct.conv(x, weight, bias, tuple(lo for lo, _ in padding), dilation, out, groups)
        if direct is not None:
            return direct
    cols = native_columns(x, kernel, stride, padding, dilation, out, groups)
    if cols is not None:
        y = scratch("gemm", (groups, o // groups, n * int(np.prod(out))), dtype)
        np.matmul(w, cols, out=y)  # [G, O/G, N * P]
        y = y.reshape((o, n) + out).swapaxes(0, 1)
        return _with_bias(y, bias)
    xp = _padded(x, padding, 0.0, "pad")
    if all(st == 1 for st in stride):
        cols, out, steps, length = _grid_columns(xp, kernel, dilation)
        y = scratch("gemm", (groups, o // groups, n * length), dtype)
        np.matmul(w, cols.reshape(groups, cg * k_total, -1), out=y)  # [G, O/G, N * length]
        y = _grid_view(y.reshape(o, n, length), n, o, out, steps, length)
    else:
        out = tuple(conv_output_size(*a) for a in zip(x.shape[2:], kernel, stride, padding, dilation))
        cols = _columns(xp, kernel, stride, dilation, out)
        y = scratch("gemm", (groups, o // groups, n * int(np.prod(out))), dtype)
        np.matmul(w, cols.reshape(groups, cg * k_total, -1), out=y)  # [G, O/G, N * P]
        y = y.reshape((o, n) + out).swapaxes(0, 1)
    return _with_bias(y, bias)


def _with_bias(y: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """A fresh contiguous ``y`` ``[N, O, *out]`` (plus ``bias`` per channel)."""
    result = np.empty(y.shape, dtype=y.dtype)
    if bias is None:
        np.copyto(result, y)
    else:
        np.add(y, bias.reshape((1, -1) + (1,) * (y.ndim - 2)), out=result)
    return result


def native_columns(x, kernel, stride, padding, dilation, out, groups) -> np.ndarray | None:
    """``[G, Cg * K, N * P]`` columns by the kernel layer's im2col (:mod:`.native_conv`),
    or ``None`` where it does not apply."""
    n, c = x.shape[:2]
    shape = (groups, c // groups * int(np.prod(kernel)), n * int(np.prod(out)))
    cols = scratch("cols", shape, x.dtype)
    return native_conv.columns(
        x, tuple(kernel), tuple(stride), tuple(lo for lo, _ in padding), tuple(dilation), out, groups, cols
    )


def _conv_transpose(x, weight, bias, stride, padding, output_padding, dilation, groups):
    """col2im: one matmul spreads each input element over its kernel window
    (``W^T x``), then the kernel positions are summed into the output one position
    at a time (contiguous runs on the grid for stride 1, strided slices otherwise)."""
    n, c_in = x.shape[:2]
    og = weight.shape[1]
    o = groups * og
    kernel = tuple(weight.shape[2:])
    spatial = tuple(x.shape[2:])
    k_total = int(np.prod(kernel))
    ig = c_in // groups
    full = tuple((m - 1) * st + d * (k - 1) + 1 for m, st, d, k in zip(spatial, stride, dilation, kernel))
    if all(st == 1 for st in stride):  # small windows: the direct kernel compiled plans run
        direct = native_direct.conv_transpose(x, weight, bias, padding, output_padding, dilation, groups)
        if direct is not None:
            return direct
    w = weight.reshape(groups, ig, og * k_total).transpose(0, 2, 1)  # [G, Og * K, Ig]
    dtype = np.result_type(x, weight)
    native = _native_conv_transpose(x, w, bias, kernel, stride, padding, output_padding, dilation, groups, o)
    if native is not None:
        return native
    total = scratch("col2im", (o, n) + full, dtype, 0)
    offsets = list(itertools.product(*(range(k) for k in kernel)))
    if all(st == 1 for st in stride):
        steps = tuple(int(np.prod(full[i + 1 :])) for i in range(len(full)))
        length = sum((m - 1) * st for m, st in zip(spatial, steps)) + 1
        xs = scratch("grid_input", (c_in, n, length), x.dtype, 0)
        np.copyto(_grid_view(xs, n, c_in, spatial, steps, length), x)
        cols = scratch("gemm", (groups, og * k_total, n * length), dtype)
        np.matmul(w, xs.reshape(groups, ig, -1), out=cols)
        cols = cols.reshape(o, k_total, n, length)
        flat = total.reshape(o, n, -1)
        for k, offset in enumerate(offsets):
            start = sum(off * d * st for off, d, st in zip(offset, dilation, steps))
            flat[:, :, start : start + length] += cols[:, k]
    else:
        xs = scratch("grid_input", (c_in, n) + spatial, x.dtype)
        np.copyto(xs, np.swapaxes(x, 0, 1))
        cols = scratch("gemm", (groups, og * k_total, n * int(np.prod(spatial))), dtype)
        np.matmul(w, xs.reshape(groups, ig, -1), out=cols)
        cols = cols.reshape((o, k_total, n) + spatial)
        view = _windows(total, kernel, stride, dilation, spatial, kernel_first=True, writeable=True)  # [O, N, *k, *in]
        for k, offset in enumerate(offsets):
            view[(slice(None), slice(None)) + offset] += cols[:, k]
    y = _padded(total, tuple((-lo, op - hi) for (lo, hi), op in zip(padding, output_padding)), 0.0).swapaxes(0, 1)
    result = np.empty(y.shape, dtype=y.dtype)
    if bias is None:
        np.copyto(result, y)
    else:
        np.add(y, bias.reshape((1, o) + (1,) * len(kernel)), out=result)
    return result


def _native_conv_transpose(x, w, bias, kernel, stride, padding, output_padding, dilation, groups, o):
    """A transposed convolution by one matmul per group into ``[G, Og * K, N * P]``
    columns and the kernel layer's col2im (:mod:`.native_conv`, bias included),
    straight into the result; ``None`` where that does not apply."""
    n, c_in = x.shape[:2]
    spatial = tuple(x.shape[2:])
    dtype = w.dtype
    size = tuple(
        (m - 1) * st - lo - hi + d * (k - 1) + 1 + op
        for m, st, (lo, hi), d, k, op in zip(spatial, stride, padding, dilation, kernel, output_padding)
    )
    if x.dtype != dtype or (bias is not None and bias.dtype != dtype):
        return None
    pad = tuple(lo for lo, _ in padding)
    run = native_conv.col2im((n, o) + size, dtype, kernel, stride, pad, dilation, spatial, groups, bias is not None)
    if run is None:
        return None
    xs = scratch("grid_input", (c_in, n) + spatial, dtype)
    np.copyto(xs, np.swapaxes(x, 0, 1))
    cols = scratch("gemm", (groups, w.shape[1], n * int(np.prod(spatial))), dtype)
    np.matmul(w, xs.reshape(groups, c_in // groups, -1), out=cols)
    y = np.empty((n, o) + size, dtype=dtype)
    run(cols, bias, y)
    return y


def _conv_weight_grad(x, grad, weight_shape, stride, padding, dilation, groups):
    n = x.shape[0]
    o = weight_shape[0]
    kernel = weight_shape[2:]
    out = grad.shape[2:]
    if all(st == 1 for st in stride):  # small windows: the direct kernel compiled plans run
        direct = native_direct.conv_weight_grad(x, grad, weight_shape, tuple(lo for lo, _ in padding), dilation, groups)
        if direct is not None:
            return direct
    native = native_columns(x, kernel, stride, padding, dilation, out, groups)
    if native is not None:
        g = scratch("grid_grad", (o, n) + tuple(out), grad.dtype)
        np.copyto(g, np.swapaxes(grad, 0, 1))
        return _weight_product(g, native, weight_shape, groups)
    xp = _padded(x, padding, 0.0, "pad")
    if all(st == 1 for st in stride):
        # Only the part of the padded input the outputs reach (an output_padding of a
        # transposed convolution may leave more).
        reach = tuple(m + d * (k - 1) for m, d, k in zip(out, dilation, kernel))
        xp = xp[(slice(None), slice(None)) + tuple(slice(0, r) for r in reach)]
        cols, _, steps, length = _grid_columns(xp, kernel, dilation)
        g = scratch("grid_grad", (o, n, length), grad.dtype, 0)
        np.copyto(_grid_view(g, n, o, out, steps, length), grad)
    else:
        cols = _columns(xp, kernel, stride, dilation, out)
        g = scratch("grid_grad", (o, n) + tuple(out), grad.dtype)
        np.copyto(g, np.swapaxes(grad, 0, 1))
    return _weight_product(g, cols, weight_shape, groups)


def _weight_product(g: np.ndarray, cols: np.ndarray, weight_shape, groups: int) -> np.ndarray:
    """``g`` ``[O, N * P]`` times the columns ``[G, Cg * K, N * P]`` transposed, as the weight's shape."""
    o = weight_shape[0]
    cols = cols.reshape(groups, int(np.prod(weight_shape[1:])), -1)
    gw = np.matmul(g.reshape(groups, o // groups, -1), cols.transpose(0, 2, 1))  # [G, O/G, Cg * K]
    return gw.reshape(weight_shape)
