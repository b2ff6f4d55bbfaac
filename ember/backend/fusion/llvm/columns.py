"""im2col for the convolutions of :mod:`.conv`: one sample's group of windows copied
into a column buffer, ``cols[(c, *k), *o] = x[c, o * stride - pad + k * dilation]``
(0 outside), straight from the input (the kernel layer's
:func:`ember.backend.kernel.llvm.columns.columns`, any stride, which flex's eager
convolutions run too) or, for stride 1, in dense runs from a zero-padded copy
(:func:`_pad_input`, :func:`_unit_columns`).
Padding, strides and dilations are compile-time constants, so each kernel position
copies dense runs and zeroes the padding without a test per element."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np
from llvmlite import ir

from ember.backend.fusion.llvm.emitter import Emitter
from ember.backend.kernel.llvm.columns import columns as _columns
from ember.backend.kernel.llvm.direct_batch import pad_input
from ember.backend.kernel.llvm.mathlib import I64
from ember.backend.kernel.views import contiguous_strides, size_of

if TYPE_CHECKING:
    from ember.backend.fusion.llvm.conv import _Conv


def _region(e: Emitter, name: str) -> ir.Value:
    return e.regions[name]


def _pad_input(e: Emitter, c: _Conv, x: ir.Value, x_base: ir.Value, padded: ir.Value, dtype: np.dtype) -> None:
    """``padded[c, *p] = x[c, p - pad]`` over the grid's padded extent (0 outside x)."""
    pad_input(e, c.cg, c.spatial, c.padded, c.pad, x, x_base, padded, dtype)


def _unit_columns(e: Emitter, c: _Conv, padded: ir.Value, cols: ir.Value, dtype: np.dtype) -> None:
    """Stride 1: ``cols[(c, *k), *o] = padded[c, o + k * dilation]``: per kernel
    position, one dense run of the last output dim per row of outputs."""
    b = e.b
    p_plane, k_total, positions = size_of(c.padded), size_of(c.kernel), c.positions
    p_strides, o_strides = contiguous_strides(c.padded), contiguous_strides(c.out)
    offsets = [
        sum(k * d * st for k, d, st in zip(offset, c.dilation, p_strides))
        for offset in itertools.product(*(range(k) for k in c.kernel))
    ]
    width = c.out[-1]

    def channel(ch: ir.Value, _: list) -> list:
        for k_flat, start in enumerate(offsets):
            src = b.add(b.mul(ch, ir.Constant(I64, p_plane)), ir.Constant(I64, start))
            dst = b.mul(
                b.add(b.mul(ch, ir.Constant(I64, k_total)), ir.Constant(I64, k_flat)), ir.Constant(I64, positions)
            )

            def row(lead: list[ir.Value], src: ir.Value = src, dst: ir.Value = dst) -> None:
                s = b.add(src, e.linear(lead, p_strides))
                d = b.add(dst, e.linear(lead, o_strides))
                e.span(0, width, lambda q: e.store(e.load(padded, b.add(s, q), dtype), cols, b.add(d, q), dtype))

            e.loops.nest(list(c.out[:-1]), row)
        return []

    e.loops.run(c.cg, channel)


def _sample_columns(e: Emitter, c: _Conv, x: ir.Value, i: ir.Value, g: int, dtype: np.dtype) -> ir.Value:
    """The columns of sample ``i``, group ``g`` (in scratch; a pointwise
    convolution's are the sample's input itself)."""
    b = e.b
    x_base = b.mul(
        b.add(b.mul(i, ir.Constant(I64, c.c_in)), ir.Constant(I64, g * c.cg)), ir.Constant(I64, size_of(c.spatial))
    )
    if c.pointwise:
        return e.at(x, x_base, dtype)
    cols = _region(e, "cols")
    if c.unit:
        padded = _region(e, "padded")
        _pad_input(e, c, x, x_base, padded, dtype)
        _unit_columns(e, c, padded, cols, dtype)
    else:
        _columns(e, c, x, x_base, cols, dtype)
    return cols
