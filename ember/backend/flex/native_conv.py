"""flex's native im2col and col2im: the kernel layer's column copy and its adjoint
(:mod:`ember.backend.kernel.llvm.columns`, the loop nests fusion's compiled
convolutions run) compiled per shape, for the whole batch: ``cols[g, (c, *k), i, *o]
= x[i, g * Cg + c, o * stride - pad + k * dilation]`` (0 outside), the layout of
flex's one matmul per group (see :mod:`.module_ops`); and, for a transposed
convolution (a convolution's input gradient), those columns summed back into the
image with the bias added, straight into the ``[N, C, *spatial]`` result.

Compiled and cached as :mod:`.native_pool`'s kernels are (and under the same
conditions: float32/float64, :data:`ember.backend.flex.native.MIN_ELEMENTS` or more
column values, ``EMBER_FLEX_NATIVE`` not ``0``); ``None`` otherwise, and flex copies
strided views with numpy instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.backend.flex import native
from ember.backend.flex.native_pool import cached, compile_entry, enabled


def columns(
    x: np.ndarray,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    pad: tuple[int, ...],
    dilation: tuple[int, ...],
    out: tuple[int, ...],
    groups: int,
    cols: np.ndarray,
) -> np.ndarray | None:
    """im2col of ``x`` ``[N, C, *spatial]`` (leading padding ``pad`` >= 0) into
    ``cols``, a contiguous ``[G, C/G * prod(kernel), N * prod(out)]`` buffer of
    ``x``'s dtype; returns ``cols``, or ``None`` where the kernel does not apply."""
    if not enabled(cols.size, x.dtype) or any(p < 0 for p in pad) or cols.dtype != x.dtype:
        return None

    from ember.backend.kernel.llvm.columns import Windows
    from ember.backend.kernel.llvm.columns import columns as emit_columns

    n, c_in = x.shape[:2]
    dtype = x.dtype
    windows = Windows(
        c_in // groups, tuple(x.shape[2:]), tuple(kernel), tuple(out), tuple(stride), tuple(pad), tuple(dilation)
    )
    ld = n * int(np.prod(out))

    def emit(parts: Any) -> None:
        e, (src, dst, _unused) = parts

        def group(_g: int, x_base: Any, block: Any, first: Any) -> None:
            emit_columns(e, windows, src, x_base, block, dtype, ld, first)

        _per_sample_group(e, windows, n, c_in, groups, dst, dtype, group)

    key = ("columns", dtype.str, n, c_in, groups, windows)
    found = cached(key, lambda: compile_entry(emit, "ember_im2col", recipe=key))
    if found is None:
        return None
    x = np.ascontiguousarray(x)
    found[1](native.address(x), native.address(cols), 0)
    return cols


def rows(
    x: np.ndarray,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    pad: tuple[int, ...],
    dilation: tuple[int, ...],
    out: tuple[int, ...],
    groups: int,
    dst: np.ndarray,
) -> np.ndarray | None:
    """The transpose of :func:`columns`, written directly: ``dst[g, (i, *o), (c, *k)]``
    (a contiguous ``[G, N * prod(out), L]`` buffer with ``L >= C/G * prod(kernel)``; the
    values past ``C/G * prod(kernel)`` in a row are left as they are), one row per
    output position, as a GEMM that reduces along the rows reads them (the quantized
    convolutions' int8 kernels); returns ``dst``, or ``None`` where the kernel does not apply."""
    if not enabled(dst.size, x.dtype) or any(p < 0 for p in pad) or dst.dtype != x.dtype:
        return None

    from ember.backend.kernel.llvm.columns import Windows
    from ember.backend.kernel.llvm.columns import columns as emit_columns

    n, c_in = x.shape[:2]
    dtype = x.dtype
    windows = Windows(
        c_in // groups, tuple(x.shape[2:]), tuple(kernel), tuple(out), tuple(stride), tuple(pad), tuple(dilation)
    )
    length = dst.shape[-1]
    block = n * int(np.prod(out)) * length

    def emit(parts: Any) -> None:
        e, (src, target, _unused) = parts

        def group(_g: int, x_base: Any, part: Any, first: Any) -> None:
            emit_columns(e, windows, src, x_base, part, dtype, 1, first, step=length)

        _per_sample_group(e, windows, n, c_in, groups, target, dtype, group, block)

    key = ("rows", dtype.str, n, c_in, groups, length, windows)
    found = cached(key, lambda: compile_entry(emit, "ember_im2row", recipe=key))
    if found is None:
        return None
    x = np.ascontiguousarray(x)
    found[1](native.address(x), native.address(dst), 0)
    return dst


def col2im(
    y_shape: tuple[int, ...],
    dtype: np.dtype,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    pad: tuple[int, ...],
    dilation: tuple[int, ...],
    windows_out: tuple[int, ...],
    groups: int,
    with_bias: bool,
) -> Callable[[np.ndarray, np.ndarray | None, np.ndarray], None] | None:
    """The compiled col2im for an image ``y_shape`` ``[N, G * Cg, *spatial]`` of
    ``dtype`` (see :func:`image_from_columns`): ``run(cols, bias, y)``; ``None`` where
    the kernel does not apply (as :func:`columns`, and for geometries too large to
    compile quickly: :func:`~ember.backend.kernel.llvm.columns.col2im_fits`)."""
    n, channels = y_shape[:2]
    rows = channels * int(np.prod(kernel))
    if not enabled(rows * n * int(np.prod(windows_out)), dtype) or any(p < 0 for p in pad):
        return None
    from llvmlite import ir

    from ember.backend.kernel.llvm.columns import Windows, col2im_fits
    from ember.backend.kernel.llvm.columns import image_from_columns as emit_image
    from ember.backend.kernel.llvm.mathlib import I64

    geometry = (tuple(kernel), tuple(windows_out), tuple(stride), tuple(pad), tuple(dilation))
    windows = Windows(channels // groups, tuple(y_shape[2:]), *geometry)
    ck = windows.cg * int(np.prod(kernel))
    ld = n * int(np.prod(windows_out))

    def emit(parts: Any) -> None:
        e, (src, dst, bias_ptr) = parts

        def group(g: int, x_base: Any, block: Any, first: Any) -> None:
            per_channel = (bias_ptr, ir.Constant(I64, g * windows.cg)) if with_bias else None
            emit_image(e, windows, block, dst, x_base, dtype, ld, first, per_channel)

        _per_sample_group(e, windows, n, channels, groups, src, dtype, group)

    key = ("col2im", np.dtype(dtype).str, n, channels, groups, with_bias, windows)

    def build() -> Any:
        return compile_entry(emit, "ember_col2im", recipe=key) if col2im_fits(windows) else None

    found = cached(key, build)
    if found is None:
        return None
    entry = found[1]
    cols_shape, image_shape = (groups, ck, ld), tuple(y_shape)

    def run(cols: np.ndarray, bias: np.ndarray | None, y: np.ndarray) -> None:
        if (
            cols.shape != cols_shape
            or y.shape != image_shape
            or not (cols.dtype == y.dtype == dtype and cols.flags.c_contiguous and y.flags.c_contiguous)
            or (bias is None) == with_bias
        ):
            raise ValueError(f"ember: col2im compiled for columns {cols_shape} and an image {image_shape} of {dtype}")
        bias = None if bias is None else np.ascontiguousarray(bias, dtype=dtype)  # kept alive over the call
        entry(native.address(cols), native.address(y), 0 if bias is None else native.address(bias))

    return run


def image_from_columns(
    cols: np.ndarray,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    pad: tuple[int, ...],
    dilation: tuple[int, ...],
    windows_out: tuple[int, ...],
    groups: int,
    bias: np.ndarray | None,
    y: np.ndarray,
) -> np.ndarray | None:
    """col2im of ``cols``, a contiguous ``[G, Cg * prod(kernel), N * prod(windows_out)]``
    buffer, into the contiguous ``y`` ``[N, G * Cg, *spatial]``: ``y[i, g * Cg + c,
    o * stride - pad + k * dilation] += cols[g, (c, *k), i, *o]`` over the kernel
    positions in order (positions outside ``y`` dropped), then ``+ bias[c]``; returns
    ``y``, or ``None`` where the kernel does not apply (see :func:`col2im`)."""
    if not (y.dtype == cols.dtype and (bias is None or bias.dtype == y.dtype)):
        return None
    run = col2im(y.shape, y.dtype, kernel, stride, pad, dilation, windows_out, groups, bias is not None)
    if run is None:
        return None
    run(cols, bias, y)
    return y


__all__ = ["col2im", "columns", "image_from_columns", "rows"]


def _per_sample_group(
    e: Any,
    windows: Any,
    n: int,
    channels: int,
    groups: int,
    cols: Any,
    dtype: np.dtype,
    body: Callable,
    block: int | None = None,
) -> None:
    """A loop over the batch's ``n`` samples calling ``body(g, x_base, block, first)``
    for each group ``g``: the image's offset of the group's first channel, the group's
    block of the column buffer ``cols`` ``[G, Cg * prod(kernel), N * prod(out)]`` (or
    of ``block`` values per group) and the sample's first column."""
    from llvmlite import ir

    from ember.backend.kernel.llvm.mathlib import I64

    b = e.b
    plane, positions = int(np.prod(windows.spatial)), int(np.prod(windows.out))
    ck = windows.cg * int(np.prod(windows.kernel))
    ld = n * positions
    per_group = ck * ld if block is None else block

    def sample(i: Any, _: list) -> list:
        first = b.mul(i, ir.Constant(I64, positions))
        for g in range(groups):
            x_base = b.mul(
                b.add(b.mul(i, ir.Constant(I64, channels)), ir.Constant(I64, g * windows.cg)), ir.Constant(I64, plane)
            )
            body(g, x_base, e.at(cols, ir.Constant(I64, g * per_group), dtype), first)
        return []

    e.loops.run(n, sample)
