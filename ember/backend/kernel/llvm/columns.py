"""im2col and its adjoint col2im, written once for fusion's compiled convolutions
(:mod:`ember.backend.fusion.llvm.conv`) and flex's eager ones
(:mod:`ember.backend.flex.native_conv`): one sample's group of windows copied into
a column buffer, ``cols[(c, *k), *o] = x[c, o * stride - pad + k * dilation]`` (0
outside), straight from the input, any stride (:func:`columns`); and the columns
summed back into the image (:func:`image_from_columns`: a transposed convolution, a
convolution's input gradient). Padding, strides and dilations are compile-time
constants, so each kernel position copies dense runs and zeroes the padding without
a test per element, and col2im knows for each run of pixels which columns reach it."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from math import prod
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
    step: int = 1,
) -> None:
    """im2col of one sample's group (any stride): ``cols[(c, *k), *o] =
    x[c, o * stride - pad + k * dilation]`` (0 outside). A row of ``cols`` holds ``ld``
    values (default: the positions), the sample's start at column ``first``; position
    ``o`` of a row is ``step`` values after position ``o - 1`` (``ld=1`` with ``step`` the
    row length writes the transpose: one row of ``(c, *k)`` values per position)."""
    b = e.b
    spatial, out, stride, pad, dilation = c.spatial, c.out, c.stride, c.pad, c.dilation
    plane, positions, k_total = size_of(spatial), size_of(out), size_of(c.kernel)
    ld = ld or positions
    s_strides, o_strides = contiguous_strides(spatial), contiguous_strides(out)
    zero = const(dtype, 0.0)
    rank = len(spatial)

    def fill(start: ir.Value, count: int) -> None:
        """Zeros at ``count`` positions from ``start``."""
        if step == 1:
            e.fill(cols, start, count, zero, dtype)
        else:
            e.span(0, count, lambda i: e.store(zero, cols, b.add(start, b.mul(i, ir.Constant(I64, step))), dtype))

    def channel(ch: ir.Value, _: list) -> list:
        source = b.add(x_base, b.mul(ch, ir.Constant(I64, plane)))
        for k_flat, offset in enumerate(itertools.product(*(range(k) for k in c.kernel))):
            row = b.mul(b.add(b.mul(ch, ir.Constant(I64, k_total)), ir.Constant(I64, k_flat)), ir.Constant(I64, ld))
            if first is not None:
                row = b.add(row, first if step == 1 else b.mul(first, ir.Constant(I64, step)))
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
                fill(dst, lo * inner)
                if d == rank - 1:

                    def copy(o: ir.Value) -> None:
                        coord = b.add(b.mul(o, ir.Constant(I64, stride[d])), ir.Constant(I64, shift))
                        at = b.add(dst, o if step == 1 else b.mul(o, ir.Constant(I64, step)))
                        e.store(e.load(x, b.add(src, coord), dtype), cols, at, dtype)

                    e.span(lo, hi, copy)
                else:

                    def nested(o: ir.Value) -> None:
                        coord = b.add(b.mul(o, ir.Constant(I64, stride[d])), ir.Constant(I64, shift))
                        dim(
                            d + 1,
                            b.add(dst, b.mul(o, ir.Constant(I64, o_strides[d] * step))),
                            b.add(src, b.mul(coord, ir.Constant(I64, s_strides[d]))),
                        )

                    e.span(lo, hi, nested)
                fill(b.add(dst, ir.Constant(I64, hi * inner * step)), (out[d] - hi) * inner)

            dim(0, row, source)
        return []

    e.loops.run(c.cg, channel)


#: The most loop nests (runs of pixels, per channel) and column loads
#: :func:`image_from_columns` emits; a geometry past either is left to the caller's
#: other path. Compiling grows with them: about 0.3 s for a 3x3 kernel at stride 1
#: (9 nests, 49 loads), 1.7 s for 7x7 at stride 2 (49, 361), 16 s for 11x11 at
#: stride 4 (324, 961).
MAX_COL2IM_NESTS = 64
MAX_COL2IM_LOADS = 512


@dataclass(frozen=True)
class PixelRun:
    """Along one dim: the pixels ``start + t * stride`` for ``t < count``, each reached
    by the same kernel positions ``k`` from the outputs ``first + t`` (``sources``:
    ``(k, first)`` pairs, ``k`` ascending)."""

    start: int
    count: int
    sources: tuple[tuple[int, int], ...]


def pixel_runs(size: int, kernel: int, out: int, stride: int, pad: int, dilation: int) -> list[PixelRun]:
    """One dim's pixels ``[0, size)`` as runs with the same sources: pixel ``s`` takes
    output ``o`` at kernel position ``k`` where ``o * stride - pad + k * dilation = s``."""
    runs: list[PixelRun] = []
    for residue in range(min(stride, size)):
        previous: tuple[tuple[int, int], ...] | None = None  # (k, o - t) of the last pixel
        for t, s in enumerate(range(residue, size, stride)):
            relative = []
            for k in range(kernel):
                o, rest = divmod(s + pad - k * dilation, stride)
                if rest == 0 and 0 <= o < out:
                    relative.append((k, o - t))
            found = tuple(relative)
            if found == previous:
                last = runs[-1]
                runs[-1] = PixelRun(last.start, last.count + 1, last.sources)
            else:
                runs.append(PixelRun(s, 1, tuple((k, o + t) for k, o in found)))
            previous = found
    return runs


def col2im_fits(c: ConvWindows) -> bool:
    """Whether :func:`image_from_columns` of ``c`` stays within :data:`MAX_COL2IM_NESTS`
    loop nests and :data:`MAX_COL2IM_LOADS` column loads."""
    per_dim = [pixel_runs(*a) for a in zip(c.spatial, c.kernel, c.out, c.stride, c.pad, c.dilation)]
    nests = prod(len(runs) for runs in per_dim)
    loads = prod(sum(len(run.sources) for run in runs) for runs in per_dim)
    return nests <= MAX_COL2IM_NESTS and loads <= MAX_COL2IM_LOADS


def image_from_columns(
    e: KernelBuilder,
    c: ConvWindows,
    cols: ir.Value,
    x: ir.Value,
    x_base: ir.Value,
    dtype: np.dtype,
    ld: int = 0,
    first: ir.Value | None = None,
    bias: tuple[ir.Value, ir.Value] | None = None,
) -> None:
    """col2im, the adjoint of :func:`columns`, of one sample's group: ``x[c, s] = 0 +
    cols[(c, *k), *o] + ...`` over the ``(k, o)`` with ``o * stride - pad + k * dilation
    = s``, the kernel positions in row-major order, then ``+ bias[c]`` with ``bias``
    (pointer, index of the group's first channel): the sums of adding each kernel
    position's columns into a zeroed image in turn, bit for bit, each pixel written
    once. ``cols`` as in :func:`columns` (rows of ``ld`` values, the sample's from
    column ``first``)."""
    b = e.b
    spatial, out, kernel = c.spatial, c.out, c.kernel
    plane, k_total = size_of(spatial), size_of(kernel)
    ld = ld or size_of(out)
    s_strides, o_strides, k_strides = contiguous_strides(spatial), contiguous_strides(out), contiguous_strides(kernel)
    per_dim = [pixel_runs(*a) for a in zip(spatial, kernel, out, c.stride, c.pad, c.dilation)]
    zero = const(dtype, 0.0)

    def channel(ch: ir.Value, _: list) -> list:
        image = b.add(x_base, b.mul(ch, ir.Constant(I64, plane)))
        rows = b.mul(ch, ir.Constant(I64, k_total * ld))
        if first is not None:
            rows = b.add(rows, first)
        shift = None if bias is None else e.load(bias[0], b.add(bias[1], ch), dtype)
        for combo in itertools.product(*per_dim):

            def pixel(ts: list[ir.Value], combo: tuple[PixelRun, ...] = combo) -> None:
                coords = [
                    b.add(ir.Constant(I64, r.start), b.mul(t, ir.Constant(I64, st)))
                    for r, t, st in zip(combo, ts, c.stride)
                ]
                target = e.linear(coords, s_strides, image)
                positions = e.linear(ts, o_strides, rows)
                total = zero
                for sources in itertools.product(*(run.sources for run in combo)):
                    k_flat = sum(k * st for (k, _), st in zip(sources, k_strides))
                    offset = k_flat * ld + sum(o * st for (_, o), st in zip(sources, o_strides))
                    value = e.load(cols, b.add(positions, ir.Constant(I64, offset)), dtype)
                    total = b.fadd(total, value)
                if shift is not None:
                    total = b.fadd(total, shift)
                e.store(total, x, target, dtype)

            e.loops.nest([run.count for run in combo], pixel)
        return []

    e.loops.run(c.cg, channel)


__all__ = [
    "MAX_COL2IM_LOADS",
    "MAX_COL2IM_NESTS",
    "ConvWindows",
    "PixelRun",
    "Windows",
    "col2im_fits",
    "columns",
    "image_from_columns",
    "pixel_runs",
]
