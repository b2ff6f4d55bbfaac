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
    from llvmlite import ir

    from ember.backend.kernel.llvm.columns import Windows
    from ember.backend.kernel.llvm.columns import columns as emit_columns
    from ember.backend.kernel.llvm.mathlib import I64

    n, c_in = x.shape[:2]
    dtype = x.dtype
    windows = Windows(
        c_in // groups, tuple(x.shape[2:]), tuple(kernel), tuple(out), tuple(stride), tuple(pad), tuple(dilation)
    )
    plane, positions = int(np.prod(windows.spatial)), int(np.prod(out))
    ck = windows.cg * int(np.prod(kernel))
    ld = n * positions

    def emit(parts: Any) -> None:
        e, (src, dst, _unused) = parts
        b = e.b

        def sample(i: ir.Value, _: list) -> list:
            first = b.mul(i, ir.Constant(I64, positions))
            for g in range(groups):
                x_base = b.mul(
                    b.add(b.mul(i, ir.Constant(I64, c_in)), ir.Constant(I64, g * windows.cg)), ir.Constant(I64, plane)
                )
                block = e.at(dst, ir.Constant(I64, g * ck * ld), dtype)
                emit_columns(e, windows, src, x_base, block, dtype, ld, first)
            return []

        e.loops.run(n, sample)

    found = cached(("columns", dtype.str, n, c_in, groups, windows), lambda: compile_entry(emit, "ember_im2col"))
    if found is None:
        return None
    x = np.ascontiguousarray(x)
    found[1](native.address(x), native.address(cols), 0)
    return cols


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
    ``y``, or ``None`` where the kernel does not apply (as :func:`columns`, and for
    geometries whose loop nest would pass
    :data:`~ember.backend.kernel.llvm.columns.MAX_COL2IM_TERMS` loads)."""
    dtype = cols.dtype
    if (
        not enabled(cols.size, dtype)
        or any(p < 0 for p in pad)
        or y.dtype != dtype
        or (bias is not None and bias.dtype != dtype)
        or not (cols.flags.c_contiguous and y.flags.c_contiguous)
    ):
        return None
    from llvmlite import ir

    from ember.backend.kernel.llvm.columns import MAX_COL2IM_TERMS, Windows, col2im_terms
    from ember.backend.kernel.llvm.columns import image_from_columns as emit_image
    from ember.backend.kernel.llvm.mathlib import I64

    n, channels = y.shape[:2]
    geometry = (tuple(kernel), tuple(windows_out), tuple(stride), tuple(pad), tuple(dilation))
    windows = Windows(channels // groups, tuple(y.shape[2:]), *geometry)
    plane, positions = int(np.prod(windows.spatial)), int(np.prod(windows_out))
    ck = windows.cg * int(np.prod(kernel))
    ld = n * positions
    with_bias = bias is not None

    def emit(parts: Any) -> None:
        e, (src, dst, bias_ptr) = parts
        b = e.b

        def sample(i: ir.Value, _: list) -> list:
            first = b.mul(i, ir.Constant(I64, positions))
            for g in range(groups):
                x_base = b.mul(
                    b.add(b.mul(i, ir.Constant(I64, channels)), ir.Constant(I64, g * windows.cg)),
                    ir.Constant(I64, plane),
                )
                block = e.at(src, ir.Constant(I64, g * ck * ld), dtype)
                per_channel = (bias_ptr, ir.Constant(I64, g * windows.cg)) if with_bias else None
                emit_image(e, windows, block, dst, x_base, dtype, ld, first, per_channel)
            return []

        e.loops.run(n, sample)

    def build() -> Any:
        return None if col2im_terms(windows) > MAX_COL2IM_TERMS else compile_entry(emit, "ember_col2im")

    found = cached(("col2im", dtype.str, n, channels, groups, with_bias, windows), build)
    if found is None:
        return None
    bias = None if bias is None else np.ascontiguousarray(bias)  # kept alive over the call
    found[1](native.address(cols), native.address(y), 0 if bias is None else native.address(bias))
    return y


__all__ = ["columns", "image_from_columns"]
