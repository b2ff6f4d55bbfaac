"""im2col, written once for fusion's compiled convolutions
(:mod:`ember.backend.fusion.llvm.conv`) and flex's eager ones
(:mod:`ember.backend.flex.native_conv`): one sample's group of windows copied into
a column buffer, ``cols[(c, *k), *o] = x[c, o * stride - pad + k * dilation]`` (0
outside), straight from the input, any stride. Padding, strides and dilations are
compile-time constants, so each kernel position copies dense runs and zeroes the
padding without a test per element."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from llvmlite import ir

from ember.backend.kernel.llvm.builder import KernelBuilder
from ember.backend.kernel.llvm.mathlib import I64, const
from ember.backend.kernel.views import contiguous_strides, size_of


class ConvWindows(Protocol):
    """What im2col reads of a convolution's geometry (per sample and group)."""

    @property
    def cg(self) -> int: ...  # input channels per group

    @property
    def spatial(self) -> tuple[int, ...]: ...

    @property
    def kernel(self) -> tuple[int, ...]: ...

    @property
    def out(self) -> tuple[int, ...]: ...

    @property
    def stride(self) -> tuple[int, ...]: ...

    @property
    def pad(self) -> tuple[int, ...]: ...  # leading padding per dim

    @property
    def dilation(self) -> tuple[int, ...]: ...


@dataclass(frozen=True)
class Windows:
    """A :class:`ConvWindows` on its own (flex's, which has no fusion geometry)."""

    cg: int
    spatial: tuple[int, ...]
    kernel: tuple[int, ...]
    out: tuple[int, ...]
    stride: tuple[int, ...]
    pad: tuple[int, ...]
    dilation: tuple[int, ...]


def columns(
    e: KernelBuilder,
    c: ConvWindows,
    x: ir.Value,
    x_base: ir.Value,
    cols: ir.Value,
    dtype: np.dtype,
    ld: int = 0,
    first: ir.Value | None = None,
) -> None:
    """im2col of one sample's group (any stride): ``cols[(c, *k), *o] =
    x[c, o * stride - pad + k * dilation]`` (0 outside). A row of ``cols`` holds ``ld``
    values (default: the positions), the sample's start at column ``first``."""
    b = e.b
    spatial, out, stride, pad, dilation = c.spatial, c.out, c.stride, c.pad, c.dilation
    plane, positions, k_total = size_of(spatial), size_of(out), size_of(c.kernel)
    ld = ld or positions
    s_strides, o_strides = contiguous_strides(spatial), contiguous_strides(out)
    zero = const(dtype, 0.0)
    rank = len(spatial)

    def channel(ch: ir.Value, _: list) -> list:
        source = b.add(x_base, b.mul(ch, ir.Constant(I64, plane)))
        for k_flat, offset in enumerate(itertools.product(*(range(k) for k in c.kernel))):
            row = b.mul(b.add(b.mul(ch, ir.Constant(I64, k_total)), ir.Constant(I64, k_flat)), ir.Constant(I64, ld))
            if first is not None:
                row = b.add(row, first)
            # Per dim: the outputs whose input coordinate lies inside, [lo, hi).
            ranges = []
            for d in range(rank):
                shift = offset[d] * dilation[d] - pad[d]  # coordinate = o * stride + shift
                lo = 0
                while lo < out[d] and lo * stride[d] + shift < 0:
                    lo += 1
                hi = lo
                while hi < out[d] and hi * stride[d] + shift < spatial[d]:
                    hi += 1
                ranges.append((lo, hi, shift))

            def dim(d: int, dst: ir.Value, src: ir.Value, ranges: list = ranges) -> None:
                lo, hi, shift = ranges[d]
                inner = size_of(out[d + 1 :])
                e.fill(cols, dst, lo * inner, zero, dtype)
                if d == rank - 1:

                    def copy(o: ir.Value) -> None:
                        coord = b.add(b.mul(o, ir.Constant(I64, stride[d])), ir.Constant(I64, shift))
                        e.store(e.load(x, b.add(src, coord), dtype), cols, b.add(dst, o), dtype)

                    e.span(lo, hi, copy)
                else:

                    def nested(o: ir.Value) -> None:
                        coord = b.add(b.mul(o, ir.Constant(I64, stride[d])), ir.Constant(I64, shift))
                        dim(
                            d + 1,
                            b.add(dst, b.mul(o, ir.Constant(I64, o_strides[d]))),
                            b.add(src, b.mul(coord, ir.Constant(I64, s_strides[d]))),
                        )

                    e.span(lo, hi, nested)
                e.fill(cols, b.add(dst, ir.Constant(I64, hi * inner)), (out[d] - hi) * inner, zero, dtype)

            dim(0, row, source)
        return []

    e.loops.run(c.cg, channel)


__all__ = ["ConvWindows", "Windows", "columns"]
