"""Convolutions as hand-written lowerings (see :mod:`.library` for the contract):
``conv`` (and ``conv_transpose`` with stride 1, a convolution with the kernel
flipped and transposed): per sample and group, the windows copied into a column
buffer in the step's scratch (*im2col*; padding, strides and dilations are
compile-time constants, so each kernel position copies dense runs and zeroes the
padding without a test per element; ``conv_transpose`` and the weight gradient copy
stride-1 columns from a zero-padded copy of the input; a pointwise convolution's
columns are its input), one ``?gemm`` straight into the output, and the bias added
while the sample's output is in cache (a convolution with few output positions per
sample runs the whole batch's columns through one ``?gemm``: :attr:`_Conv.batched`);
``conv_weight_grad``: the same columns per sample, the weight gradient accumulated by
one ``?gemm`` per sample. The columns are :mod:`.columns`'. In plans that run ember's
own products or on hosts with 512-bit vectors, a float32 stride-1 convolution with small
windows (forward, ``conv_transpose`` or ``conv_weight_grad``) runs the direct kernel
instead (:mod:`.direct`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from llvmlite import ir

from ember.backend.fusion.graph import Graph, Node, Ref
from ember.backend.fusion.llvm.columns import _columns, _region, _sample_columns
from ember.backend.fusion.llvm.direct import direct_core, direct_geometry, direct_weight_geometry, direct_weight_grad
from ember.backend.fusion.llvm.emitter import FLOATS as _FLOATS
from ember.backend.fusion.llvm.emitter import Emitter, LibraryOp
from ember.backend.kernel.llvm.mathlib import I64, const, reg_type
from ember.backend.kernel.views import size_of

#: The most output positions per sample of a convolution whose samples share one ``?gemm``
#: (:attr:`_Conv.batched`).
BATCH_POSITIONS = 256
#: ... whose weight holds at least this many values (a small weight costs little to pack:
#: the small CNN's 32x144 runs 1.3-1.7x slower batched, its columns out of cache)...
BATCH_WEIGHT = 65536
#: ... and whose batch's columns and product fit in this many bytes of scratch.
BATCH_SCRATCH = 64 << 20


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

    @property
    def batched(self) -> bool:
        """A forward convolution of few output positions per sample (ResNet's last
        stages: 14x14, 7x7): every sample's columns side by side, ``[ck, n * positions]``,
        and one ``?gemm`` for the whole batch. Per sample, the ``?gemm`` is thin
        (``positions`` columns) and BLAS packs the whole weight again for each; the batch
        packs it once, for the price of copying the columns (a pointwise convolution's
        too) and the output back per sample."""
        return (
            not self.pad_copy
            and self.groups == 1
            and self.n > 1
            and self.positions <= BATCH_POSITIONS
            and self.c_out * self.ck >= BATCH_WEIGHT
            and self.n * (self.ck + self.c_out) * self.positions * self.item <= BATCH_SCRATCH
        )

    def regions(self, weight_grad: bool = False, flipped: int = 0) -> dict[str, int]:
        """Scratch offsets: the flipped kernel (``flipped`` bytes), the padded input
        (stride 1), the columns, and the transposed weight-gradient accumulator
        (``weight_grad``)."""
        scratch = Scratch()
        regions = {}
        if flipped:
            regions["flipped"] = scratch.add(flipped)
        if self.batched:
            regions["cols"] = scratch.add(self.n * self.ck * self.positions * self.item)
            regions["product"] = scratch.add(self.n * self.c_out * self.positions * self.item)
        elif not self.pointwise:
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
    direct = direct_geometry(e, c, dtype)
    if direct is not None:
        direct_core(e, c, direct, x, w, bias, out, block, epilogue)
        return
    if c.batched:
        _batched_core(e, c, x, w, bias, out, dtype, block, epilogue)
        return

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


def _batched_core(
    e: Emitter,
    c: _Conv,
    x: ir.Value,
    w: ir.Value,
    bias: ir.Value | None,
    out: ir.Value | None,
    dtype: np.dtype,
    block: Callable[[ir.Value], ir.Value] | None,
    epilogue: Callable[[ir.Value, ir.Value], None] | None,
) -> None:
    """:func:`conv_core` for a :attr:`_Conv.batched` convolution: the columns of every
    sample side by side, one ``?gemm`` into a ``[c_out, n * positions]`` product, then
    per sample its block copied out, and the epilogue (or the bias) while it is in cache."""
    b = e.b
    positions, wide = c.positions, c.n * c.positions
    cols, product = _region(e, "cols"), _region(e, "product")
    plane = size_of(c.spatial)

    def columns(i: ir.Value, _: list) -> list:
        x_base = b.mul(i, ir.Constant(I64, c.c_in * plane))
        _columns(e, c, x, x_base, cols, dtype, wide, b.mul(i, ir.Constant(I64, positions)))
        return []

    e.loops.run(c.n, columns)
    e.gemm(
        dtype, False, False, c.c_out, wide, c.ck, w, c.ck, cols, wide, ir.Constant(reg_type(dtype), 0.0), product, wide
    )

    def sample(i: ir.Value, _: list) -> list:
        if block is not None:
            dst = block(i)
        else:
            dst = e.at(out, b.mul(i, ir.Constant(I64, c.c_out * positions)), dtype)
        start = b.mul(i, ir.Constant(I64, positions))

        def channel(o: ir.Value, _: list) -> list:
            src = b.add(b.mul(o, ir.Constant(I64, wide)), start)
            row = b.mul(o, ir.Constant(I64, positions))
            value = e.load(bias, o, dtype) if bias is not None and epilogue is None else None

            def copy(p: ir.Value) -> None:
                got = e.load(product, b.add(src, p), dtype)
                e.store(got if value is None else b.fadd(got, value), dst, b.add(row, p), dtype)

            e.span(0, positions, copy)
            return []

        e.loops.run(c.c_out, channel)
        if epilogue is not None:
            epilogue(i, dst)
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
    ``grad @ cols^T`` here); the weight gradient is the accumulator transposed. A
    small-window stride-1 float32 one runs the direct kernel instead where the plan
    runs direct convolutions (:func:`.direct.direct_weight_grad`; the scratch keeps
    the columns' regions, which it does not use)."""
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
    direct = direct_weight_geometry(e, c, dtype)
    if direct is not None:
        direct_weight_grad(e, c, direct, e.args[x], e.args[grad], out)
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
