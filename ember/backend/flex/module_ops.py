"""flex's module ops: convolution by im2col plus one matmul, vectorised pooling.

Windows are strided views of the padded input (``as_strided``); one copy makes
them contiguous columns and one (batched) matmul does the arithmetic. No Python
loop runs over the batch or the pixels; only conv-transpose with stride > 1 and
overlapping average pooling loop over the kernel positions. float16/bfloat16 are
computed in float32 and rounded back.
"""

from __future__ import annotations

import itertools

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ember.backend.flex.quiet import quiet_reset, quiet_set
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


def _work(x: np.ndarray) -> np.ndarray:
    """``x`` in a dtype numpy computes well (float32 for the half types)."""
    return x if x.dtype in _FLOATS else x.astype(_F32)


def _padded(x: np.ndarray, padding: Pairs, value: float) -> np.ndarray:
    """``x`` with its trailing dims padded by ``padding`` pairs (negative ones crop)."""
    lead = x.ndim - len(padding)
    if any(lo < 0 or hi < 0 for lo, hi in padding):
        crop = [slice(None)] * lead + [slice(max(-lo, 0), n - max(-hi, 0)) for (lo, hi), n in zip(padding, x.shape[lead:])]
        x = x[tuple(crop)]
        padding = tuple((max(lo, 0), max(hi, 0)) for lo, hi in padding)
    if not any(lo or hi for lo, hi in padding):
        return x
    shape = x.shape[:lead] + tuple(n + lo + hi for n, (lo, hi) in zip(x.shape[lead:], padding))
    out = np.full(shape, value, dtype=x.dtype)
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


def _divisor(spatial: Ints, kernel: Ints, stride: Ints, padding: Pairs, out: Ints, include_pad: bool, dtype) -> np.ndarray:
    total = np.ones((), dtype=np.float64)
    rank = len(spatial)
    for axis in range(rank):
        counts = window_counts(spatial[axis], kernel[axis], stride[axis], padding[axis], out[axis], include_pad)
        shape = [1] * rank
        shape[axis] = out[axis]
        total = total * counts.astype(np.float64).reshape(shape)
    return total.astype(dtype)


def _flip_transpose(weight: np.ndarray, groups: int) -> np.ndarray:
    """A conv-transpose weight ``[C_in, C_out/g, *k]`` as the conv weight
    ``[C_out, C_in/g, *k]`` (flipped) of the equivalent stride-1 convolution."""
    c_in, og = weight.shape[:2]
    kernel = weight.shape[2:]
    w = weight.reshape((groups, c_in // groups, og) + kernel).swapaxes(1, 2)
    w = w.reshape((groups * og, c_in // groups) + kernel)
    return np.ascontiguousarray(np.flip(w, tuple(range(2, w.ndim))))


class FlexModuleOps(ModuleOps):
    """numpy kernels for the module ops (see the module docstring)."""

    # ------------------------------------------------------------------ convolution
    def conv(self, x, weight, bias, stride, padding, dilation, groups):
        dtype = x.dtype
        token = quiet_set()
        try:
            y = _conv(_work(x), _work(weight), None if bias is None else _work(bias), stride, padding, dilation, groups)
        finally:
            quiet_reset(token)
        return y if y.dtype == dtype else y.astype(dtype)

    def conv_transpose(self, x, weight, bias, stride, padding, output_padding, dilation, groups):
        dtype = x.dtype
        token = quiet_set()
        try:
            y = _conv_transpose(
                _work(x), _work(weight), None if bias is None else _work(bias),
                stride, padding, output_padding, dilation, groups,
            )
        finally:
            quiet_reset(token)
        return y if y.dtype == dtype else y.astype(dtype)

    def conv_weight_grad(self, x, grad, weight_shape, stride, padding, dilation, groups):
        dtype = grad.dtype
        token = quiet_set()
        try:
            gw = _conv_weight_grad(_work(x), _work(grad), tuple(weight_shape), stride, padding, dilation, groups)
        finally:
            quiet_reset(token)
        return gw if gw.dtype == dtype else gw.astype(dtype)

    # ------------------------------------------------------------------ max pooling
    def max_pool(self, x, kernel, stride, padding, dilation, ceil_mode):
        dtype = x.dtype
        xw = _work(x)
        spatial = x.shape[2:]
        out = tuple(pool_output_size(*a, ceil_mode) for a in zip(spatial, kernel, stride, padding, dilation))
        xp = _padded(xw, _ceil_pads(spatial, kernel, stride, padding, dilation, out), -np.inf)
        view = _windows(xp, kernel, stride, dilation, out, kernel_first=True)
        token = quiet_set()
        try:
            # A running maximum over the kernel positions (NaN propagates, as in PyTorch).
            y = None
            for offset in itertools.product(*(range(k) for k in kernel)):
                piece = view[(slice(None), slice(None)) + offset]
                y = piece.copy() if y is None else np.maximum(y, piece, out=y)
        finally:
            quiet_reset(token)
        return y if y.dtype == dtype else y.astype(dtype)

    def max_pool_with_indices(self, x, kernel, stride, padding, dilation, ceil_mode):
        dtype = x.dtype
        xw = _work(x)
        n, c = x.shape[:2]
        spatial = x.shape[2:]
        rank = len(spatial)
        out = tuple(pool_output_size(*a, ceil_mode) for a in zip(spatial, kernel, stride, padding, dilation))
        xp = _padded(xw, _ceil_pads(spatial, kernel, stride, padding, dilation, out), -np.inf)
        k_total = int(np.prod(kernel))
        windows = _windows(xp, kernel, stride, dilation, out, kernel_first=False).reshape((n, c) + out + (k_total,))
        local = windows.argmax(axis=-1)
        values = np.take_along_axis(windows, local[..., None], axis=-1)[..., 0]
        # Local window position -> flat input position (clipped into the input for
        # windows whose maximum sits on padding, which only an all -inf window has).
        flat = np.zeros((1, 1) + out, dtype=np.int64)
        rest = local
        step = 1
        for axis in range(rank - 1, -1, -1):
            k = kernel[axis]
            offset, rest = rest % k, rest // k
            shape = [1] * (rank + 2)
            shape[2 + axis] = out[axis]
            base = (np.arange(out[axis], dtype=np.int64) * stride[axis] - padding[axis][0]).reshape(shape)
            flat = flat + np.clip(base + offset * dilation[axis], 0, spatial[axis] - 1) * step
            step *= spatial[axis]
        values = values if values.dtype == dtype else values.astype(dtype)
        return values, flat

    def max_pool_backward(self, grad, indices, input_shape):
        n, c = input_shape[:2]
        size = int(np.prod(input_shape[2:]))
        rows = n * c
        g = grad.reshape(rows, -1)
        idx = indices.reshape(rows, -1) + (np.arange(rows, dtype=np.int64) * size)[:, None]
        gw = _work(g)
        total = np.bincount(idx.reshape(-1), weights=gw.reshape(-1), minlength=rows * size)
        return total.astype(grad.dtype, copy=False).reshape(input_shape)

    # ------------------------------------------------------------------ average pooling
    def avg_pool(self, x, kernel, stride, padding, count_include_pad, ceil_mode):
        dtype = x.dtype
        xw = _work(x)
        spatial = x.shape[2:]
        ones = (1,) * len(kernel)
        out = tuple(pool_output_size(s, k, st, p, 1, ceil_mode) for s, k, st, p in zip(spatial, kernel, stride, padding))
        xp = _padded(xw, _ceil_pads(spatial, kernel, stride, padding, ones, out), 0.0)
        view = _windows(xp, kernel, stride, ones, out, kernel_first=True)
        token = quiet_set()
        try:
            total = None
            for offset in itertools.product(*(range(k) for k in kernel)):
                piece = view[(slice(None), slice(None)) + offset]
                total = piece.copy() if total is None else np.add(total, piece, out=total)
            total /= _divisor(spatial, kernel, stride, padding, out, count_include_pad, total.dtype)
        finally:
            quiet_reset(token)
        return total if total.dtype == dtype else total.astype(dtype)

    def avg_pool_backward(self, grad, input_shape, kernel, stride, padding, count_include_pad, ceil_mode):
        dtype = grad.dtype
        spatial = tuple(input_shape[2:])
        ones = (1,) * len(kernel)
        out = tuple(grad.shape[2:])
        g = _work(grad) / _divisor(spatial, kernel, stride, padding, out, count_include_pad, _work(grad).dtype)
        pads = _ceil_pads(spatial, kernel, stride, padding, ones, out)
        padded = tuple(s + lo + hi for s, (lo, hi) in zip(spatial, pads))
        total = np.zeros(tuple(input_shape[:2]) + padded, dtype=g.dtype)
        view = _windows(total, kernel, stride, ones, out, kernel_first=True, writeable=True)
        for offset in itertools.product(*(range(k) for k in kernel)):
            piece = view[(slice(None), slice(None)) + offset]
            piece += g
        result = _padded(total, tuple((-lo, -hi) for lo, hi in pads), 0.0)
        return np.ascontiguousarray(result, dtype=dtype)

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
                y = np.moveaxis(np.moveaxis(y, 2 + i, -1) @ adaptive_pool_matrix(spatial[i], o).astype(y.dtype), -1, 2 + i)
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


def _check_rows(op: str, indices: np.ndarray, size: int) -> None:
    if indices.size and (indices.min() < 0 or indices.max() >= size):
        bad = indices[(indices < 0) | (indices >= size)].reshape(-1)[0]
        raise IndexOutOfBoundsError(
            f"ember: {op}: index {int(bad)} is out of bounds for {size} embeddings (indices must lie in [0, {size}))"
        )


# ---------------------------------------------------------------------- kernels
def _conv(x, weight, bias, stride, padding, dilation, groups):
    n, c = x.shape[:2]
    o, cg = weight.shape[:2]
    kernel = weight.shape[2:]
    spatial = x.shape[2:]
    out = tuple(conv_output_size(*a) for a in zip(spatial, kernel, stride, padding, dilation))
    k_total = int(np.prod(kernel))
    p_total = int(np.prod(out))
    xp = _padded(x, padding, 0.0)
    cols = np.ascontiguousarray(_windows(xp, kernel, stride, dilation, out, kernel_first=True))
    if groups == 1:
        y = np.matmul(weight.reshape(o, cg * k_total), cols.reshape(n, c * k_total, p_total))
    else:
        y = np.matmul(weight.reshape(groups, o // groups, cg * k_total), cols.reshape(n, groups, cg * k_total, p_total))
    y = y.reshape((n, o) + out)
    if bias is not None:
        y += bias.reshape((1, o) + (1,) * len(out))
    return y


def _conv_transpose(x, weight, bias, stride, padding, output_padding, dilation, groups):
    kernel = weight.shape[2:]
    if all(s == 1 for s in stride):
        # A stride-1 transpose is a plain convolution with the flipped, transposed kernel.
        pads = tuple(
            (d * (k - 1) - lo, d * (k - 1) - hi + op)
            for k, d, (lo, hi), op in zip(kernel, dilation, padding, output_padding)
        )
        xp = _padded(x, pads, 0.0)
        zero = ((0, 0),) * len(kernel)
        return _conv(xp, _flip_transpose(weight, groups), bias, stride, zero, dilation, groups)
    n, c_in = x.shape[:2]
    og = weight.shape[1]
    spatial = x.shape[2:]
    k_total = int(np.prod(kernel))
    ig = c_in // groups
    p_total = int(np.prod(spatial))
    w = weight.reshape(groups, ig, og * k_total).transpose(0, 2, 1)  # [G, Og*K, Ig]
    cols = np.matmul(w, x.reshape(n, groups, ig, p_total))  # [N, G, Og*K, P]
    cols = cols.reshape((n, groups * og) + tuple(kernel) + tuple(spatial))
    full = tuple((m - 1) * s + d * (k - 1) + 1 for m, s, d, k in zip(spatial, stride, dilation, kernel))
    total = np.zeros((n, groups * og) + full, dtype=cols.dtype)
    view = _windows(total, kernel, stride, dilation, spatial, kernel_first=True, writeable=True)
    for offset in itertools.product(*(range(k) for k in kernel)):
        piece = view[(slice(None), slice(None)) + offset]
        piece += cols[(slice(None), slice(None)) + offset]
    y = _padded(total, tuple((-lo, op - hi) for (lo, hi), op in zip(padding, output_padding)), 0.0)
    y = np.ascontiguousarray(y)
    if bias is not None:
        y += bias.reshape((1, groups * og) + (1,) * len(kernel))
    return y


def _conv_weight_grad(x, grad, weight_shape, stride, padding, dilation, groups):
    n = x.shape[0]
    o, cg = weight_shape[:2]
    kernel = weight_shape[2:]
    out = grad.shape[2:]
    k_total = int(np.prod(kernel))
    np_total = n * int(np.prod(out))
    xp = _padded(x, padding, 0.0)
    view = _windows(xp, kernel, stride, dilation, out, kernel_first=True)  # [N, C, *k, *out]
    rank = len(kernel)
    cols = np.ascontiguousarray(view.transpose((1,) + tuple(range(2, 2 + rank)) + (0,) + tuple(range(2 + rank, 2 + 2 * rank))))
    cols = cols.reshape(groups, cg * k_total, np_total)
    g = np.ascontiguousarray(np.swapaxes(grad, 0, 1)).reshape(groups, o // groups, np_total)
    gw = np.matmul(g, cols.transpose(0, 2, 1))  # [G, Og, Cg*K]
    return gw.reshape(weight_shape)
