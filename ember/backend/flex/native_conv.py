"""flex's native im2col: the kernel layer's column copy
(:func:`ember.backend.kernel.llvm.columns.columns`, the one fusion's compiled
convolutions run) compiled per shape, for the whole batch: ``cols[g, (c, *k), i, *o]
= x[i, g * Cg + c, o * stride - pad + k * dilation]`` (0 outside), the layout of
flex's one matmul per group (see :mod:`.module_ops`).

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


__all__ = ["columns"]
