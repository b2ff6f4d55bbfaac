"""Convolutions as hand-written lowerings (see :mod:`.library` for the contract):
``conv`` (and ``conv_transpose`` with stride 1, a convolution with the kernel
flipped and transposed): per sample and group, the windows copied into a column
buffer in the step's scratch (*im2col*; padding, strides and dilations are
compile-time constants, so each kernel position copies dense runs and zeroes the
padding without a test per element; ``conv_transpose`` and the weight gradient copy
stride-1 columns from a zero-padded copy of the input; a pointwise convolution's
columns are its input), one ``?gemm`` straight into the output, and the bias added
while the sample's output is in cache; ``conv_weight_grad``: the same columns per
sample, the weight gradient accumulated by one ``?gemm`` per sample.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from llvmlite import ir

from ember.backend.fusion.graph import Graph, Node, Ref
from ember.backend.fusion.llvm.emitter import FLOATS as _FLOATS
from ember.backend.fusion.llvm.emitter import Emitter, LibraryOp
from ember.backend.kernel.llvm.mathlib import I64, const, reg_type
from ember.backend.kernel.views import contiguous_strides, size_of


def _align(n: int) -> int:
    return (n + 63) // 64 * 64


class Scratch:
    """Regions of a step's scratch, each 64-byte aligned: ``add`` returns a region's
    byte offset; ``size`` is the total."""

    def __init__(self) -> None:
        self.size = 0

    def add(self, nbytes: int) -> int:
        offset = self.size
        self.size += _align(nbytes)
        return offset


@dataclass(frozen=True)
class _Conv:
    """A convolution's geometry (see :func:`conv_core`)."""

    n: int
    c_in: int
    c_out: int
    groups: int
    spatial: tuple[int, ...]
    kernel: tuple[int, ...]
    out: tuple[int, ...]
    stride: tuple[int, ...]
    pad: tuple[int, ...]
    dilation: tuple[int, ...]
    item: int
    #: Whether stride-1 columns are copied from a padded copy of the input (the weight
    #: gradient and ``conv_transpose``); a forward convolution copies them straight
    #: from the input (one copy, not two: 7% less CPU time for compiled ResNet-50 and
    #: the small CNN at inference, and faster to compile).
    pad_copy: bool = True

    @property
    def cg(self) -> int:
        return self.c_in // self.groups

    @property
    def og(self) -> int:
        return self.c_out // self.groups

    @property
    def ck(self) -> int:
        return self.cg * size_of(self.kernel)

    @property
    def unit(self) -> bool:
        """Stride 1 (with ``pad_copy``): the columns are copied from a padded input in dense runs."""
        return self.pad_copy and all(s == 1 for s in self.stride)

    @property
    def pointwise(self) -> bool:
        """A 1x1 kernel, stride 1, no padding: the input *is* the columns (no copy)."""
        return (
            all(k == 1 for k in self.kernel)
            and all(s == 1 for s in self.stride)
            and not any(self.pad)
            and self.out == self.spatial
        )

    @property
    def padded(self) -> tuple[int, ...]:
        """The padded input a stride-1 convolution reads: as far as its windows reach."""
        return tuple(o + d * (k - 1) for o, d, k in zip(self.out, self.dilation, self.kernel))

    @property
    def positions(self) -> int:
        return size_of(self.out)

    def regions(self, weight_grad: bool = False, flipped: int = 0) -> dict[str, int]:
        """Scratch offsets: the flipped kernel (``flipped`` bytes), the padded input
        (stride 1), the columns, and the transposed weight-gradient accumulator
        (``weight_grad``)."""
        scratch = Scratch()
        regions = {}
        if flipped:
            regions["flipped"] = scratch.add(flipped)
        if not self.pointwise:
            if self.unit:
                regions["padded"] = scratch.add(self.cg * size_of(self.padded) * self.item)
            regions["cols"] = scratch.add(self.ck * self.positions * self.item)
        if weight_grad:
            regions["acc"] = scratch.add(self.groups * self.ck * self.og * self.item)
        regions["size"] = scratch.size
        return regions


def _geometry(
    x_shape: tuple[int, ...],
    c_out: int,
    kernel: tuple[int, ...],
    out: tuple[int, ...],
    stride: Any,
    padding: tuple[int, ...],
    dilation: Any,
    groups: int,
    item: int,
) -> _Conv:
    return _Conv(
        x_shape[0],
        x_shape[1],
        c_out,
        groups,
        tuple(x_shape[2:]),
        tuple(kernel),
        tuple(out),
        tuple(stride),
        tuple(padding),
        tuple(dilation),
        item,
    )


def _region(e: Emitter, name: str) -> ir.Value:
    return e.regions[name]


def _pad_input(e: Emitter, c: _Conv, x: ir.Value, x_base: ir.Value, padded: ir.Value, dtype: np.dtype) -> None:
    """``padded[c, *p] = x[c, p - pad]`` over the grid's padded extent (0 outside x)."""
    b = e.b
    plane, p_plane = size_of(c.spatial), size_of(c.padded)
    e.fill(padded, ir.Constant(I64, 0), c.cg * p_plane, const(dtype, 0.0), dtype)
    s_strides, p_strides = contiguous_strides(c.spatial), contiguous_strides(c.padded)
    # The input extent that lands inside the padded extent, per dim.
    extent = tuple(min(s, p - lo) for s, p, lo in zip(c.spatial, c.padded, c.pad))
    if any(n <= 0 for n in extent):
        return
    rank = len(c.spatial)

    def rows(pos: list[ir.Value]) -> None:
        channel, lead = pos[0], pos[1:]
        src = b.add(b.add(x_base, b.mul(channel, ir.Constant(I64, plane))), e.linear(lead, s_strides))
        dst = b.add(
            b.mul(channel, ir.Constant(I64, p_plane)),
            e.linear([b.add(i, ir.Constant(I64, c.pad[d])) for d, i in enumerate(lead)], p_strides),
        )
        dst = b.add(dst, ir.Constant(I64, c.pad[rank - 1]))
        e.span(0, extent[-1], lambda i: e.store(e.load(x, b.add(src, i), dtype), padded, b.add(dst, i), dtype))

    e.loops.nest([c.cg, *extent[:-1]], rows)


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


def _columns(e: Emitter, c: _Conv, x: ir.Value, x_base: ir.Value, cols: ir.Value, dtype: np.dtype) -> None:
    """im2col of one sample's group (any stride): ``cols[(c, *k), *o] =
    x[c, o * stride - pad + k * dilation]`` (0 outside)."""
    b = e.b
    spatial, out, stride, pad, dilation = c.spatial, c.out, c.stride, c.pad, c.dilation
    plane, positions, k_total = size_of(spatial), size_of(out), size_of(c.kernel)
    s_strides, o_strides = contiguous_strides(spatial), contiguous_strides(out)
    zero = const(dtype, 0.0)
    rank = len(spatial)

    def channel(ch: ir.Value, _: list) -> list:
        source = b.add(x_base, b.mul(ch, ir.Constant(I64, plane)))
        for k_flat, offset in enumerate(itertools.product(*(range(k) for k in c.kernel))):
            row = b.mul(
                b.add(b.mul(ch, ir.Constant(I64, k_total)), ir.Constant(I64, k_flat)), ir.Constant(I64, positions)
            )
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


def conv_core(
    e: Emitter,
    c: _Conv,
    x: ir.Value,
    w: ir.Value,
    bias: ir.Value | None,
    out: ir.Value | None,
    dtype: np.dtype,
    block: Callable[[ir.Value], ir.Value] | None = None,
    epilogue: Callable[[ir.Value, ir.Value], None] | None = None,
) -> None:
    """``out = conv(x, w) + bias``: per sample and group, the columns, one ``?gemm``
    into the output (``M * N * K`` stays small for a sample, where OpenBLAS runs
    without packing), and the bias added while the sample's output is in cache.

    A convolution chain passes ``block(i)``, where sample ``i``'s output goes (instead
    of its place in ``out``), and ``epilogue(i, block)``, which runs after the
    sample's ``?gemm`` instead of the bias pass."""
    b = e.b
    og, ck, positions = c.og, c.ck, c.positions
    t = reg_type(dtype)

    def sample(i: ir.Value, _: list) -> list:
        if block is not None:
            dst = block(i)
        else:
            dst = e.at(out, b.mul(i, ir.Constant(I64, c.c_out * positions)), dtype)
        for g in range(c.groups):
            cols = _sample_columns(e, c, x, i, g, dtype)
            e.gemm(
                dtype,
                False,
                False,
                og,
                positions,
                ck,
                e.at(w, ir.Constant(I64, g * og * ck), dtype),
                ck,
                cols,
                positions,
                ir.Constant(t, 0.0),
                e.at(dst, ir.Constant(I64, g * og * positions), dtype),
                positions,
            )
        if epilogue is not None:
            epilogue(i, dst)
        elif bias is not None:

            def channel(o: ir.Value, _: list) -> list:
                row = b.mul(o, ir.Constant(I64, positions))
                value = e.load(bias, o, dtype)
                e.span(
                    0,
                    positions,
                    lambda p: e.store(b.fadd(e.load(dst, b.add(row, p), dtype), value), dst, b.add(row, p), dtype),
                )
                return []

            e.loops.run(c.c_out, channel)
        return []

    e.loops.run(c.n, sample)


def _pads(padding: Any) -> tuple[int, ...]:
    return tuple(lo for lo, _ in padding)


def _conv_supports(graph: Graph, node: Node, target: Any) -> bool:
    x, weight, bias, _stride, padding, _dilation, groups = node.args
    avals = graph.avals
    if target.blas is None or type(x) is not Ref or type(weight) is not Ref:
        return False
    dtype = avals[x].dtype
    if dtype not in _FLOATS or avals[weight].dtype != dtype or (bias is not None and avals[bias].dtype != dtype):
        return False
    out = avals[node.outs[0]].shape
    return (
        len(avals[x].shape) >= 3
        and all(lo >= 0 and hi >= 0 for lo, hi in padding)
        and size_of(out) > 0
        and avals[weight].shape[1] * groups == avals[x].shape[1]
    )


def conv_geometry(graph: Graph, node: Node) -> _Conv:
    x, weight, _bias, stride, padding, dilation, groups = node.args
    avals = graph.avals
    w_shape = avals[weight].shape
    c = _geometry(
        avals[x].shape,
        w_shape[0],
        w_shape[2:],
        avals[node.outs[0]].shape[2:],
        stride,
        _pads(padding),
        dilation,
        groups,
        avals[x].dtype.itemsize,
    )
    return replace(c, pad_copy=False)


def _conv_scratch(graph: Graph, node: Node) -> dict[str, int]:
    return conv_geometry(graph, node).regions()


def _conv(e: Emitter) -> None:
    x, weight, bias = e.node.args[:3]
    c = conv_geometry(e.graph, e.node)
    conv_core(e, c, e.args[x], e.args[weight], None if bias is None else e.args[bias], e.outs[0], e.dtype(x))


def _transpose_pads(graph: Graph, node: Node) -> tuple[int, ...] | None:
    """The padding of the convolution a stride-1 ``conv_transpose`` is, or ``None``."""
    _x, weight, _bias, stride, padding, output_padding, dilation, _groups = node.args
    kernel = graph.avals[weight].shape[2:]
    if any(s != 1 for s in stride):
        return None
    pads = []
    for k, d, (lo, hi), op in zip(kernel, dilation, padding, output_padding):
        low, high = d * (k - 1) - lo, d * (k - 1) - hi + op
        if low < 0 or high < 0:
            return None
        pads.append(low)
    return tuple(pads)


def _transpose_supports(graph: Graph, node: Node, target: Any) -> bool:
    x, weight, bias = node.args[:3]
    avals = graph.avals
    if target.blas is None or type(x) is not Ref or type(weight) is not Ref:
        return False
    dtype = avals[x].dtype
    if dtype not in _FLOATS or avals[weight].dtype != dtype or (bias is not None and avals[bias].dtype != dtype):
        return False
    return (
        len(avals[x].shape) >= 3
        and _transpose_pads(graph, node) is not None
        and size_of(avals[node.outs[0]].shape) > 0
        and avals[weight].shape[0] == avals[x].shape[1]
    )


def _transpose_geometry(graph: Graph, node: Node) -> tuple[_Conv, int]:
    """The convolution a stride-1 ``conv_transpose`` is, and its flipped kernel's bytes."""
    x, weight, _bias, _stride, _padding, _output_padding, dilation, groups = node.args
    avals = graph.avals
    w_shape = avals[weight].shape
    pads = _transpose_pads(graph, node)
    assert pads is not None, "_transpose_supports checked the padding"
    c = _geometry(
        avals[x].shape,
        groups * w_shape[1],
        w_shape[2:],
        avals[node.outs[0]].shape[2:],
        (1,) * (len(w_shape) - 2),
        pads,
        dilation,
        groups,
        avals[x].dtype.itemsize,
    )
    return c, size_of(w_shape) * avals[x].dtype.itemsize


def _transpose_scratch(graph: Graph, node: Node) -> dict[str, int]:
    c, flipped = _transpose_geometry(graph, node)
    return c.regions(flipped=flipped)


def _conv_transpose(e: Emitter) -> None:
    """Stride 1: a convolution of ``x`` with the kernel flipped and its channel dims
    swapped per group (built in scratch), padded by ``dilation * (k - 1) - pad``."""
    x, weight, bias = e.node.args[:3]
    groups = e.node.args[7]
    b = e.b
    dtype = e.dtype(x)
    c, _ = _transpose_geometry(e.graph, e.node)
    w_shape = e.shape(weight)
    og = w_shape[1]
    ig = c.cg
    k_total = size_of(c.kernel)
    flipped = _region(e, "flipped")
    w = e.args[weight]
    # flipped[g * og + o, c, k] = w[g * ig + c, o, k_total - 1 - k]
    for g in range(groups):

        def over_o(o: ir.Value, _: list, g: int = g) -> list:
            def over_c(ch: ir.Value, _: list) -> list:
                src = b.mul(
                    b.add(b.mul(b.add(ch, ir.Constant(I64, g * ig)), ir.Constant(I64, og)), o),
                    ir.Constant(I64, k_total),
                )
                dst = b.mul(
                    b.add(b.mul(b.add(o, ir.Constant(I64, g * og)), ir.Constant(I64, ig)), ch),
                    ir.Constant(I64, k_total),
                )

                def over_k(k: ir.Value) -> None:
                    value = e.load(w, b.add(src, b.sub(ir.Constant(I64, k_total - 1), k)), dtype)
                    e.store(value, flipped, b.add(dst, k), dtype)

                e.span(0, k_total, over_k)
                return []

            e.loops.run(ig, over_c)
            return []

        e.loops.run(og, over_o)
    conv_core(e, c, e.args[x], flipped, None if bias is None else e.args[bias], e.outs[0], dtype)


def _weight_grad_supports(graph: Graph, node: Node, target: Any) -> bool:
    x, grad, weight_shape, _stride, padding, _dilation, groups = node.args
    avals = graph.avals
    if target.blas is None or type(x) is not Ref or type(grad) is not Ref:
        return False
    dtype = avals[x].dtype
    return (
        dtype in _FLOATS
        and avals[grad].dtype == dtype
        and len(avals[x].shape) >= 3
        and all(lo >= 0 and hi >= 0 for lo, hi in padding)
        and size_of(tuple(weight_shape)) > 0
        and weight_shape[1] * groups == avals[x].shape[1]
    )


def _weight_grad_geometry(graph: Graph, node: Node) -> _Conv:
    x, grad, weight_shape, stride, padding, dilation, groups = node.args
    avals = graph.avals
    return _geometry(
        avals[x].shape,
        weight_shape[0],
        tuple(weight_shape[2:]),
        avals[grad].shape[2:],
        stride,
        _pads(padding),
        dilation,
        groups,
        avals[x].dtype.itemsize,
    )


def _weight_grad_scratch(graph: Graph, node: Node) -> dict[str, int]:
    return _weight_grad_geometry(graph, node).regions(weight_grad=True)


def _conv_weight_grad(e: Emitter) -> None:
    """Per sample and group: the columns, and ``acc[ck, o] += cols @ grad^T`` (the
    transposed accumulation, which ``?gemm`` runs about 1.5x faster than
    ``grad @ cols^T`` here); the weight gradient is the accumulator transposed."""
    x, grad, weight_shape = e.node.args[:3]
    b = e.b
    dtype = e.dtype(x)
    c = _weight_grad_geometry(e.graph, e.node)
    og, ck, positions = c.og, c.ck, c.positions
    t = reg_type(dtype)
    out = e.outs[0]
    if c.n == 0 or positions == 0:
        e.fill(out, ir.Constant(I64, 0), size_of(tuple(weight_shape)), const(dtype, 0.0), dtype)
        return
    acc = _region(e, "acc")

    def sample(i: ir.Value, _: list) -> list:
        beta = b.select(b.icmp_unsigned("==", i, ir.Constant(I64, 0)), ir.Constant(t, 0.0), ir.Constant(t, 1.0))
        for g in range(c.groups):
            cols = _sample_columns(e, c, e.args[x], i, g, dtype)
            first = b.mul(
                b.add(b.mul(i, ir.Constant(I64, c.c_out)), ir.Constant(I64, g * og)), ir.Constant(I64, positions)
            )
            e.gemm(
                dtype,
                False,
                True,
                ck,
                og,
                positions,
                cols,
                positions,
                e.at(e.args[grad], first, dtype),
                positions,
                beta,
                e.at(acc, ir.Constant(I64, g * ck * og), dtype),
                og,
            )
        return []

    e.loops.run(c.n, sample)

    # out[g * og + o, k] = acc[g][k, o]
    def transpose(pos: list[ir.Value]) -> None:
        g, o, k = pos
        src = b.add(b.mul(b.add(b.mul(g, ir.Constant(I64, ck)), k), ir.Constant(I64, og)), o)
        dst = b.add(b.mul(b.add(b.mul(g, ir.Constant(I64, og)), o), ir.Constant(I64, ck)), k)
        e.store(e.load(acc, src, dtype), out, dst, dtype)

    e.loops.nest([c.groups, og, ck], transpose)


#: op -> its lowering.
CONV_OPS: dict[str, LibraryOp] = {
    "conv": LibraryOp(_conv_supports, _conv_scratch, _conv),
    "conv_transpose": LibraryOp(_transpose_supports, _transpose_scratch, _conv_transpose),
    "conv_weight_grad": LibraryOp(_weight_grad_supports, _weight_grad_scratch, _conv_weight_grad),
}

__all__ = ["CONV_OPS", "Scratch", "conv_core", "conv_geometry"]
