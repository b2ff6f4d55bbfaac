"""Max pooling and its backward as loop nests over ``rows`` planes, written once for
fusion's compiled steps (:mod:`ember.backend.fusion.llvm.library`) and flex's eager
kernels (:mod:`ember.backend.flex.native_pool`).

* :func:`max_pool_rows`: a running maximum over the kernel positions in order, taking
  a later value when it is greater or NaN (the first maximum wins ties, a NaN wins),
  padding read as ``-inf``; the index is the flat position in the input plane, each
  coordinate clipped into the input (the first real element of a window whose
  maximum is ``-inf``), as PyTorch does;
* :func:`max_pool_backward_rows`: zeros, then each output's gradient added at its
  index, in row-major order.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from ember.backend.kernel.llvm.builder import KernelBuilder
from ember.backend.kernel.llvm.mathlib import I64, const, mem_type, reg_type
from ember.backend.kernel.views import contiguous_strides, size_of

#: Float32 outputs per vector of a pooling with no indices (float64: half as many).
POOL_LANES = 16
#: The dtype of the indices (flat positions in an input plane).
INDEX = np.dtype(np.int64)


@dataclass(frozen=True)
class PoolGeometry:
    """A pooling's planes: input ``spatial`` and ``out`` sizes, and per dim the
    ``kernel``, ``stride``, leading padding ``pad`` (>= 0) and ``dilation``."""

    spatial: tuple[int, ...]
    out: tuple[int, ...]
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    pad: tuple[int, ...]
    dilation: tuple[int, ...]


def max_pool_rows(
    e: KernelBuilder,
    g: PoolGeometry,
    dtype: np.dtype,
    x: ir.Value,
    values: ir.Value,
    indices: ir.Value | None,
    rows: int,
) -> None:
    """The max pooling of ``rows`` contiguous planes of ``x`` into ``values`` and
    ``indices`` (``None``: the values only)."""
    spatial, out = g.spatial, g.out
    plane, out_plane = size_of(spatial), size_of(out)
    if rows * out_plane == 0:
        return
    b = e.b
    s_strides = contiguous_strides(spatial)
    o_strides = contiguous_strides(out)
    neg_inf = ir.Constant(reg_type(dtype), float("-inf"))
    if indices is None and _inside(g):
        _max_pool_inside(e, g, dtype, x, values, rows)
        return

    def body(pos: list[ir.Value]) -> None:
        row, opos = pos[0], pos[1:]
        base = b.mul(row, ir.Constant(I64, plane))
        best = best_index = None
        for offset in itertools.product(*(range(k) for k in g.kernel)):
            inside: ir.Value | None = None
            flat: ir.Value = ir.Constant(I64, 0)
            for d, (o, k) in enumerate(zip(opos, offset)):
                coord = b.add(b.mul(o, ir.Constant(I64, g.stride[d])), ir.Constant(I64, k * g.dilation[d] - g.pad[d]))
                ok = b.and_(
                    b.icmp_signed(">=", coord, ir.Constant(I64, 0)),
                    b.icmp_signed("<", coord, ir.Constant(I64, spatial[d])),
                )
                inside = ok if inside is None else b.and_(inside, ok)
                low = b.select(b.icmp_signed("<", coord, ir.Constant(I64, 0)), ir.Constant(I64, 0), coord)
                clipped = b.select(
                    b.icmp_signed(">=", low, ir.Constant(I64, spatial[d])), ir.Constant(I64, spatial[d] - 1), low
                )
                flat = b.add(flat, b.mul(clipped, ir.Constant(I64, s_strides[d])))
            value = b.select(inside, e.load(x, b.add(base, flat), dtype), neg_inf)
            if best is None:
                best, best_index = value, flat
                continue
            take = b.or_(b.fcmp_ordered(">", value, best), b.fcmp_unordered("uno", value, value))
            best = b.select(take, value, best)
            if indices is not None:
                best_index = b.select(take, flat, best_index)
        target = b.add(b.mul(row, ir.Constant(I64, out_plane)), e.linear(opos, o_strides))
        e.store(best, values, target, dtype)
        if indices is not None:
            e.store(best_index, indices, target, INDEX)

    e.loops.nest([rows, *out], body)


def _inside(g: PoolGeometry) -> bool:
    """Whether every window lies inside the input (no padding is read)."""
    return all(
        (o - 1) * s + (k - 1) * d - p >= 0 and (o - 1) * s + (k - 1) * d - p < n and p == 0
        for n, o, k, s, p, d in zip(g.spatial, g.out, g.kernel, g.stride, g.pad, g.dilation)
    )


def _max_pool_inside(
    e: KernelBuilder, g: PoolGeometry, dtype: np.dtype, x: ir.Value, values: ir.Value, rows: int
) -> None:
    """:func:`max_pool_rows` without indices where every window lies inside the input:
    the same running maximum in the same order, with no bounds tests, ``lanes``
    outputs of a row at a time (:data:`POOL_LANES`): per kernel position, one load of
    the run of the input row the lanes' windows span and a shuffle picking each lane's
    value (a row's last vector overlaps the one before when the row is not a multiple
    of the lanes: it writes the same values again). A row narrower than a vector (of
    at least 4 outputs) is one vector of the next power of two, its loads and store
    masked to the row (the small CNN's 14- and 7-wide rows: 11% less CPU time for its
    compiled forward than two overlapping half-width vectors)."""
    b = e.b
    spatial, out = g.spatial, g.out
    plane, out_plane = size_of(spatial), size_of(out)
    s_strides = contiguous_strides(spatial)
    o_strides = contiguous_strides(out)
    lanes = POOL_LANES * 4 // dtype.itemsize
    # A row narrower than a vector: one vector of the next power of two, its loads and
    # store masked to the row (no overlapping second vector).
    masked = 4 <= out[-1] < lanes
    while lanes > out[-1] and not masked:
        lanes //= 2
    while masked and lanes // 2 >= out[-1]:
        lanes //= 2
    if lanes < 4:
        lanes = 1
    stride, dilation = g.stride[-1], g.dilation[-1]
    span = (lanes - 1) * stride + (g.kernel[-1] - 1) * dilation + 1
    element = reg_type(dtype)
    block = ir.VectorType(element, span) if lanes > 1 else element
    module = b.module
    if masked:
        valid = (out[-1] - 1) * stride + (g.kernel[-1] - 1) * dilation + 1
        i1 = ir.IntType(1)
        load_mask = ir.Constant(ir.VectorType(i1, span), [int(i < valid) for i in range(span)])
        store_mask = ir.Constant(ir.VectorType(i1, lanes), [int(i < out[-1]) for i in range(lanes)])
        kind = "f32" if dtype.itemsize == 4 else "f64"
        vec = ir.VectorType(element, lanes)
        ptr = ir.PointerType()
        i32 = ir.IntType(32)
        name = f"llvm.masked.load.v{span}{kind}.p0"
        masked_load = module.globals.get(name) or ir.Function(
            module, ir.FunctionType(block, [ptr, i32, load_mask.type, block]), name=name
        )
        name = f"llvm.masked.store.v{lanes}{kind}.p0"
        masked_store = module.globals.get(name) or ir.Function(
            module, ir.FunctionType(ir.VoidType(), [vec, ptr, i32, store_mask.type]), name=name
        )
        align = ir.Constant(i32, dtype.itemsize)
        zeros = ir.Constant(block, [0.0] * span)
    lead_offsets = [
        sum(k * d * st for k, d, st in zip(offset, g.dilation, s_strides))
        for offset in itertools.product(*(range(k) for k in g.kernel[:-1]))
    ]
    steps = [s * st for s, st in zip(g.stride, s_strides)]

    def chunk(base: ir.Value, target: ir.Value, first: ir.Value) -> None:
        """Outputs ``first + [0, lanes)`` of a row: input row start ``base``, output ``target``."""
        start = b.add(base, b.mul(first, ir.Constant(I64, stride)))
        best = None
        for lead in lead_offsets:
            at = b.gep(x, [b.add(start, ir.Constant(I64, lead))], source_etype=mem_type(dtype))
            if masked:
                run = b.call(masked_load, [at, align, load_mask, zeros])
            else:
                run = b.load(at, typ=block, align=dtype.itemsize)
            for j in range(g.kernel[-1]):
                if lanes == 1:
                    value = b.load(
                        b.gep(at, [ir.Constant(I64, j * dilation)], source_etype=mem_type(dtype)),
                        typ=element,
                        align=dtype.itemsize,
                    )
                else:
                    mask = ir.Constant(
                        ir.VectorType(ir.IntType(32), lanes), [j * dilation + lane * stride for lane in range(lanes)]
                    )
                    value = b.shuffle_vector(run, ir.Constant(block, ir.Undefined), mask)
                if best is None:
                    best = value
                    continue
                take = b.or_(b.fcmp_ordered(">", value, best), b.fcmp_unordered("uno", value, value))
                best = b.select(take, value, best)
        assert best is not None
        out_at = b.gep(values, [b.add(target, first)], source_etype=mem_type(dtype))
        if masked:
            b.call(masked_store, [best, out_at, align, store_mask])
        else:
            b.store(best, out_at, align=dtype.itemsize)

    full, rest = divmod(out[-1], lanes) if not masked else (1, 0)

    def body(pos: list[ir.Value]) -> None:
        row, opos = pos[0], pos[1:]
        base = b.add(b.mul(row, ir.Constant(I64, plane)), e.linear(opos, tuple(steps[:-1])))
        target = b.add(b.mul(row, ir.Constant(I64, out_plane)), e.linear(opos, o_strides[:-1]))

        def over_chunks(t: ir.Value, _: list) -> list:
            chunk(base, target, b.mul(t, ir.Constant(I64, lanes)))
            return []

        e.loops.run(full, over_chunks)
        if rest:
            chunk(base, target, ir.Constant(I64, out[-1] - lanes))

    e.loops.nest([rows, *out[:-1]], body)


def max_pool_backward_rows(
    e: KernelBuilder,
    dtype: np.dtype,
    grad: ir.Value,
    indices: ir.Value,
    out: ir.Value,
    rows: int,
    plane: int,
    out_plane: int,
    checked: Callable[[ir.Value], ir.Value] = lambda index: index,
) -> None:
    """``out`` (``rows`` planes of ``plane``) = 0, then ``out[row, indices[row, j]] +=
    grad[row, j]``; ``checked`` maps each index to one inside the plane (the caller's
    bounds check; by default the indices are trusted)."""
    b = e.b
    e.fill(out, ir.Constant(I64, 0), rows * plane, const(dtype, 0.0), dtype)
    if rows * out_plane == 0:
        return

    def body(pos: list[ir.Value]) -> None:
        row, j = pos
        flat = b.add(b.mul(row, ir.Constant(I64, out_plane)), j)
        index = checked(e.load(indices, flat, INDEX))
        target = b.add(b.mul(row, ir.Constant(I64, plane)), index)
        e.store(b.fadd(e.load(out, target, dtype), e.load(grad, flat, dtype)), out, target, dtype)

    e.loops.nest([rows, out_plane], body)


__all__ = ["INDEX", "PoolGeometry", "max_pool_backward_rows", "max_pool_rows"]
