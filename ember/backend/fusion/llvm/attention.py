"""Scaled dot-product attention as two hand-written lowerings (see :mod:`.library` for
the contract): ``attention`` and ``attention_backward`` of float32/float64 values,
one step each instead of the composite's matmuls, scale, mask, softmax passes and
dropout (:mod:`ember.backend.composites.attention` defines the math; this computes
the same, in the same order of operations, to float rounding).

Per ``(batch, head)`` block, while its ``[L, S]`` score matrix is in cache:

* forward: ``P = Q K^T`` (one ``?gemm`` into the weights' output), then per row the
  scores ``P * scale (+ bias)`` with hidden keys (``mask``, and with ``causal`` the
  keys after the query, from their index) at ``fill`` and their maximum; ``exp(s -
  max)`` and its sum; the weights ``e * (1 / sum)`` (and ``P * keep`` for dropout,
  in scratch); ``context = P V`` (one ``?gemm``). A row whose maximum is ``-inf``
  gets zero weights where the composite gives them (a ``-inf`` fill, or a bias);
* backward: ``dV = D^T G``; ``dS = G V^T`` (one ``?gemm`` into the scores' gradient
  or scratch), then per row ``dS * keep``, ``dot = sum(dS * P)``, ``dS = P (dS -
  dot)`` and zero at hidden keys; ``dQ = (dS K) * scale``, ``dK = (dS^T Q) * scale``.

A causal block runs in row tiles (:func:`_tiles`): a tile's products stop at its last
query's keys, the rest of its rows' weights (and scores' gradients) being zeros, so
about half the block's multiply-adds are skipped. This is exact where the skipped keys
weigh 0: the forward does it when hidden keys are at ``-inf``, the backward for ``dQ``
and ``dK`` always and for ``dS`` when the graph's forward used ``-inf`` (an infinite or
NaN value or gradient at a hidden key gives 0 here where the composite's ``0 * inf``
gives NaN, as flash attention does).

The mask and the bias are read through their views (strides 0 where they broadcast:
a causal ``[L, S]`` pattern or a ``[B, 1, 1, S]`` padding mask serves every block from
its compact form). The float32 exponential is flex's flushed one (as the softmax row
kernel, :mod:`.rows`); float64 calls libm's ``exp``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from llvmlite import ir

from ember.backend.fusion.graph import Graph, Node, Ref, Sc
from ember.backend.fusion.llvm.emitter import FLOATS, Emitter, LibraryOp
from ember.backend.kernel.llvm.mathlib import I8, I32, I64, const, reg_type
from ember.backend.kernel.views import View

_F64_REG = ir.DoubleType()

_BOOL = np.dtype(np.bool_)
#: A causal block's row tiles: at least this many rows, at most this many tiles (each
#: tile's products stop at its last query's keys; more tiles, more and smaller ?gemm).
MIN_TILE = 16
MAX_TILES = 8


def _constant(value: Any) -> bool:
    """A float the plan knows (a literal, or the source graph's placeholder that a
    capture fixes); a run-time scalar (a fusion device's) leaves the node to flex."""
    return isinstance(value, (float, int, np.floating, Sc))


def _same_floats(graph: Graph, refs: list[Any], dtype: np.dtype, shape: tuple[int, ...]) -> bool:
    avals = graph.avals
    return all(r is None or (type(r) is Ref and avals[r].dtype == dtype and avals[r].shape == shape) for r in refs)


def _blocks_agree(graph: Graph, q: Any, k: Any, v: Any, target: Any) -> tuple[int, int, int, int] | None:
    """``(L, S, E, Ev)`` where query, key and value are float ``[..., L, E]``, ``[..., S,
    E]``, ``[..., S, Ev]`` of one dtype and batch, none empty, and BLAS is there."""
    if getattr(target, "blas", None) is None or any(type(r) is not Ref for r in (q, k, v)):
        return None
    aq, ak, av = graph.avals[q], graph.avals[k], graph.avals[v]
    if aq.dtype not in FLOATS or not aq.dtype == ak.dtype == av.dtype or len(aq.shape) < 2:
        return None
    if not aq.shape[:-2] == ak.shape[:-2] == av.shape[:-2] or ak.shape[-1] != aq.shape[-1]:
        return None
    if ak.shape[-2] != av.shape[-2] or 0 in aq.shape or 0 in ak.shape or 0 in av.shape:
        return None
    return aq.shape[-2], ak.shape[-2], aq.shape[-1], av.shape[-1]


def _mask_ok(graph: Graph, mask: Any, full: tuple[int, ...]) -> bool:
    return mask is None or (type(mask) is Ref and graph.avals[mask].dtype == _BOOL and graph.avals[mask].shape == full)


def _forward_supports(graph: Graph, node: Node, target: Any) -> bool:
    q, k, v, mask, bias, fill, scale, causal, keep = node.args
    dims = _blocks_agree(graph, q, k, v, target)
    if dims is None or not (_constant(fill) and _constant(scale)) or type(causal) is not bool:
        return False
    aq = graph.avals[q]
    full = aq.shape[:-1] + (dims[1],)
    return _mask_ok(graph, mask, full) and _same_floats(graph, [bias, keep], aq.dtype, full)


def _backward_supports(graph: Graph, node: Node, target: Any) -> bool:
    q, k, v, probs, mask, keep, grad, scale, causal, *needs = node.args
    dims = _blocks_agree(graph, q, k, v, target)
    if dims is None or not _constant(scale) or type(causal) is not bool or not any(needs):
        return False
    aq = graph.avals[q]
    full = aq.shape[:-1] + (dims[1],)
    context = aq.shape[:-1] + (dims[3],)
    return (
        _mask_ok(graph, mask, full)
        and _same_floats(graph, [probs, keep], aq.dtype, full)
        and _same_floats(graph, [grad], aq.dtype, context)
    )


def _block_bytes(graph: Graph, node: Node) -> int:
    aq = graph.avals[node.args[0]]
    return aq.shape[-2] * graph.avals[node.args[1]].shape[-2] * aq.dtype.itemsize


def _forward_scratch(graph: Graph, node: Node) -> dict[str, int]:
    if node.args[8] is None:  # no dropout: the context reads the weights' output
        return {}
    return {"dropped": 0, "size": _block_bytes(graph, node)}


def _backward_scratch(graph: Graph, node: Node) -> dict[str, int]:
    keep, (need_q, need_k, need_v, need_s) = node.args[5], node.args[9:13]
    regions: dict[str, int] = {}
    size = _block_bytes(graph, node)
    at = 0
    if keep is not None and need_v:
        regions["dropped"], at = at, at + size
    if (need_q or need_k) and not need_s:  # the scores' gradient lives in its output otherwise
        regions["ds"], at = at, at + size
    if regions:
        regions["size"] = at
    return regions


# ---------------------------------------------------------------------- shared pieces
class _Block:
    """What the row passes of one ``(batch, head)`` block read: pointers at the block's
    first element and how the mask and bias are indexed."""

    def __init__(self, e: Emitter, bh: ir.Value, lead: tuple[int, ...]):
        self.e = e
        self.bh = bh
        self.lead = lead

    def dense(self, ptr: ir.Value, per_block: int, dtype: np.dtype) -> ir.Value:
        """``ptr`` advanced to this block of a dense ``[..., n, m]`` value."""
        return self.e.at(ptr, self.e.b.mul(self.bh, ir.Constant(I64, per_block)), dtype)

    def strided(self, ref: int, dtype: np.dtype) -> tuple[ir.Value, int, int]:
        """The block's first element of ``ref`` read through its view, with the row
        and column strides."""
        e, b = self.e, self.e.b
        view = e.views.get(ref) or View.contiguous(e.shape(ref))
        strides = view.strides
        offset: ir.Value = ir.Constant(I64, 0)
        inner = 1
        for d in range(len(self.lead) - 1, -1, -1):
            n, stride = self.lead[d], strides[d]
            if stride and n > 1:
                index = b.urem(b.udiv(self.bh, ir.Constant(I64, inner)), ir.Constant(I64, n))
                offset = b.add(offset, b.mul(index, ir.Constant(I64, stride)))
            inner *= n
        return e.at(e.args[ref], offset, dtype), strides[-2], strides[-1]


def _hidden_test(
    e: Emitter, block: _Block, mask: Any, causal: bool
) -> Callable[[ir.Value, ir.Value], ir.Value | None] | None:
    """``hidden(i, j)``: an ``i1`` (true: key ``j`` hidden from query ``i``), or ``None``
    where nothing is hidden."""
    if mask is None and not causal:
        return None
    b = e.b
    at = block.strided(mask, _BOOL) if mask is not None else None

    def hidden(i: ir.Value, j: ir.Value) -> ir.Value:
        out = None
        if at is not None:
            ptr, rs, cs = at
            index = b.add(b.mul(i, ir.Constant(I64, rs)), b.mul(j, ir.Constant(I64, cs)))
            byte = b.load(b.gep(ptr, [index], source_etype=I8), typ=I8, align=1)
            out = b.icmp_unsigned("!=", byte, ir.Constant(I8, 0))
        if causal:
            later = b.icmp_signed(">", j, i)
            out = later if out is None else b.or_(out, later)
        return out

    return hidden


def _key(b: ir.IRBuilder, v: ir.Value, bits: ir.IntType) -> ir.Value:
    """An integer ordered as the float ``v`` (NaN with the sign bit clear above ``inf``)."""
    i = b.bitcast(v, bits)
    flip = b.and_(b.ashr(i, ir.Constant(bits, bits.width - 1)), ir.Constant(bits, (1 << (bits.width - 1)) - 1))
    return b.xor(i, flip)


def _from_key(b: ir.IRBuilder, key: ir.Value, t: ir.Type) -> ir.Value:
    bits = key.type
    flip = b.and_(b.ashr(key, ir.Constant(bits, bits.width - 1)), ir.Constant(bits, (1 << (bits.width - 1)) - 1))
    return b.bitcast(b.xor(key, flip), t)


def _exp(e: Emitter, x: ir.Value, dtype: np.dtype) -> ir.Value:
    if dtype.itemsize == 4:
        return e.module.math.exp_f32_flushed(e.b, x)
    return e.module.math.call(e.b, "exp", x)


def _scale_block(e: Emitter, ptr: ir.Value, count: int, scale: ir.Value, dtype: np.dtype) -> None:
    b = e.b

    def body(i: ir.Value) -> None:
        e.store(b.fmul(e.load(ptr, i, dtype), scale), ptr, i, dtype)

    e.span(0, count, body)


def _lead(e: Emitter, ref: int) -> tuple[int, ...]:
    return e.shape(ref)[:-2]


def _tiles(nq: int, nk: int, causal: bool) -> list[tuple[int, int, int]]:
    """Row tiles ``(first, end, keys)`` of a block: with ``causal``, the rows of a tile
    see only the keys before ``min(nk, end)`` (the others are hidden: their weights and
    scores' gradients are 0), so its products stop there; otherwise one tile."""
    if not causal or nq < 2 * MIN_TILE:
        return [(0, nq, nk)]
    size = max(MIN_TILE, -(-nq // MAX_TILES))
    return [(r, min(nq, r + size), min(nk, r + size)) for r in range(0, nq, size)]


def _zero_tail(e: Emitter, ptrs: list[ir.Value], first: int, end: int, keys: int, nk: int, dtype: np.dtype) -> None:
    """``ptr[first:end, keys:] = 0`` for each block of ``ptrs`` (``[., nk]`` rows)."""
    if keys >= nk:
        return
    b = e.b
    zero = const(dtype, 0.0)

    def body(pos: list[ir.Value]) -> None:
        at = b.add(
            b.mul(b.add(pos[0], ir.Constant(I64, first)), ir.Constant(I64, nk)), b.add(pos[1], ir.Constant(I64, keys))
        )
        for ptr in ptrs:
            e.store(zero, ptr, at, dtype)

    e.loops.nest([end - first, nk - keys], body)


def _fill_of(graph: Graph, probs: Any) -> float | None:
    """The fill of the ``attention`` node of ``graph`` whose weights are ``probs`` (``None``
    where another node made them)."""
    for node in graph.nodes:
        if node.op == "attention" and len(node.outs) == 2 and node.outs[1] == probs:
            fill = node.args[5]
            return float(fill) if isinstance(fill, (float, int, np.floating)) else None
    return None


def _row_offset(e: Emitter, ptr: ir.Value, row: int, width: int, dtype: np.dtype) -> ir.Value:
    return e.at(ptr, ir.Constant(I64, row * width), dtype) if row else ptr


# ---------------------------------------------------------------------- forward
def _forward(e: Emitter) -> None:
    q, k, v, mask, bias, fill, scale, causal, keep = e.node.args
    dtype = e.dtype(q)
    (nq, dim), (nk, dim_v) = e.shape(q)[-2:], e.shape(v)[-2:]
    lead = _lead(e, q)
    blocks = int(np.prod(lead, dtype=np.int64))
    b = e.b
    t = reg_type(dtype)
    bits = I32 if dtype.itemsize == 4 else I64
    zero, one = const(dtype, 0.0), const(dtype, 1.0)
    scale_c, fill_c = const(dtype, float(scale)), const(dtype, float(fill))
    zero_rows = float(fill) == -math.inf or bias is not None  # rows of only -inf: zero weights
    # Keys after the query hidden at -inf weigh exactly 0: a causal block's tiles skip them.
    tiles = _tiles(nq, nk, causal and float(fill) == -math.inf)
    context, weights = e.outs

    def block_body(bh: ir.Value, _: list) -> list:
        blk = _Block(e, bh, lead)
        p = blk.dense(weights, nq * nk, dtype)
        qb, kb, vb = (
            blk.dense(e.args[q], nq * dim, dtype),
            blk.dense(e.args[k], nk * dim, dtype),
            blk.dense(e.args[v], nk * dim_v, dtype),
        )
        out = blk.dense(context, nq * dim_v, dtype)
        hidden = _hidden_test(e, blk, mask, causal)
        bias_at = blk.strided(bias, dtype) if bias is not None else None
        keep_p = blk.dense(e.args[keep], nq * nk, dtype) if keep is not None else None
        dropped = e.regions["dropped"] if keep is not None else None
        for first, end, keys in tiles:
            _forward_tile(first, end, keys, p, qb, kb, vb, out, hidden, bias_at, keep_p, dropped)
        return []

    def _forward_tile(first, end, keys, p, qb, kb, vb, out, hidden, bias_at, keep_p, dropped) -> None:
        rows = end - first
        e.gemm(dtype, False, True, rows, keys, dim, _row_offset(e, qb, first, dim, dtype), dim, kb, dim, zero,
               _row_offset(e, p, first, nk, dtype), nk)  # fmt: skip

        def row(r: ir.Value, _: list) -> list:
            i = b.add(r, ir.Constant(I64, first)) if first else r
            base = b.mul(i, ir.Constant(I64, nk))

            def scores(j: ir.Value, carried: list) -> list:
                at = b.add(base, j)
                s = b.fmul(e.load(p, at, dtype), scale_c)
                if bias_at is not None:
                    ptr, rs, cs = bias_at
                    index = b.add(b.mul(i, ir.Constant(I64, rs)), b.mul(j, ir.Constant(I64, cs)))
                    s = b.fadd(s, e.load(ptr, index, dtype))
                if hidden is not None:
                    s = b.select(hidden(i, j), fill_c, s)
                e.store(s, p, at, dtype)
                key = _key(b, s, bits)
                return [b.select(b.icmp_signed(">", key, carried[0]), key, carried[0])]

            (key,) = e.loops.run(keys, scores, [ir.Constant(bits, -(1 << (bits.width - 1)))])
            peak = _from_key(b, key, t)
            empty = b.fcmp_ordered("==", peak, const(dtype, -math.inf)) if zero_rows else None
            shift = b.select(empty, zero, peak) if empty is not None else peak

            def expo(j: ir.Value, carried: list) -> list:
                at = b.add(base, j)
                value = _exp(e, b.fsub(e.load(p, at, dtype), shift), dtype)
                e.store(value, p, at, dtype)
                return [b.fadd(carried[0], value, flags=("reassoc",))]

            (total,) = e.loops.run(keys, expo, [zero])
            inv = b.fdiv(one, total)
            if empty is not None:
                inv = b.select(empty, zero, inv)

            def normalise(j: ir.Value, _: list) -> list:
                at = b.add(base, j)
                w = b.fmul(e.load(p, at, dtype), inv)
                e.store(w, p, at, dtype)
                if keep_p is not None:
                    e.store(b.fmul(w, e.load(keep_p, at, dtype)), dropped, at, dtype)
                return []

            e.loops.run(keys, normalise)
            return []

        e.loops.run(rows, row)
        _zero_tail(e, [p] if dropped is None else [p, dropped], first, end, keys, nk, dtype)
        source = dropped if dropped is not None else p
        e.gemm(dtype, False, False, rows, dim_v, keys, _row_offset(e, source, first, nk, dtype), nk, vb, dim_v, zero,
               _row_offset(e, out, first, dim_v, dtype), dim_v)  # fmt: skip

    e.loops.run(blocks, block_body)


# ---------------------------------------------------------------------- backward
def _backward(e: Emitter) -> None:
    q, k, v, probs, mask, keep, grad, scale, causal, need_q, need_k, need_v, need_s = e.node.args
    dtype = e.dtype(q)
    (nq, dim), (nk, dim_v) = e.shape(q)[-2:], e.shape(v)[-2:]
    lead = _lead(e, q)
    blocks = int(np.prod(lead, dtype=np.int64))
    b = e.b
    zero, one = const(dtype, 0.0), const(dtype, 1.0)
    scale_c = const(dtype, float(scale))
    # Each row's dot(dS, P) of float32 values is summed in float64, as flex's eager kernel
    # sums it: both round the same all but exact sum, so compiled and eager gradients agree.
    wide = dtype == np.dtype(np.float32)
    # The scores' gradient is 0 at hidden keys whatever the fill: a causal block's tiles
    # skip them in dQ and dK; in dS (whose row sums read every weight) only where the
    # forward hid them at -inf (dV reads the weights: all of them).
    tiles = _tiles(nq, nk, causal)
    score_tiles = _tiles(nq, nk, causal and _fill_of(e.graph, probs) == -math.inf)
    outs = iter(e.outs)
    g_q = next(outs) if need_q else None
    g_k = next(outs) if need_k else None
    g_v = next(outs) if need_v else None
    g_s = next(outs) if need_s else None

    def block_body(bh: ir.Value, _: list) -> list:
        blk = _Block(e, bh, lead)
        p = blk.dense(e.args[probs], nq * nk, dtype)
        g = blk.dense(e.args[grad], nq * dim_v, dtype)
        vb = blk.dense(e.args[v], nk * dim_v, dtype)
        keep_p = blk.dense(e.args[keep], nq * nk, dtype) if keep is not None else None
        if g_v is not None:
            d = p
            if keep_p is not None:
                d = e.regions["dropped"]
                e.span(
                    0, nq * nk, lambda i: e.store(b.fmul(e.load(p, i, dtype), e.load(keep_p, i, dtype)), d, i, dtype)
                )
            e.gemm(dtype, True, False, nk, dim_v, nq, d, nk, g, dim_v, zero, blk.dense(g_v, nk * dim_v, dtype), dim_v)
        if g_q is None and g_k is None and g_s is None:
            return []
        ds = blk.dense(g_s, nq * nk, dtype) if g_s is not None else e.regions["ds"]
        hidden = _hidden_test(e, blk, mask, causal)
        for first, end, keys in score_tiles:
            _scores_tile(first, end, keys, p, g, vb, keep_p, ds, hidden)
        if g_q is not None:
            out = blk.dense(g_q, nq * dim, dtype)
            kb = blk.dense(e.args[k], nk * dim, dtype)
            for first, end, keys in tiles:
                e.gemm(dtype, False, False, end - first, dim, keys, _row_offset(e, ds, first, nk, dtype), nk, kb, dim,
                       zero, _row_offset(e, out, first, dim, dtype), dim)  # fmt: skip
            _scale_block(e, out, nq * dim, scale_c, dtype)
        if g_k is not None:
            out = blk.dense(g_k, nk * dim, dtype)
            qb = blk.dense(e.args[q], nq * dim, dtype)
            if len(tiles) > 1:  # the tiles' products accumulate
                e.fill(out, ir.Constant(I64, 0), nk * dim, zero, dtype)
            for first, end, keys in tiles:
                e.gemm(dtype, True, False, keys, dim, end - first, _row_offset(e, ds, first, nk, dtype), nk,
                       _row_offset(e, qb, first, dim, dtype), dim, one if len(tiles) > 1 else zero, out, dim)  # fmt: skip
            _scale_block(e, out, nk * dim, scale_c, dtype)
        return []

    def _scores_tile(first, end, keys, p, g, vb, keep_p, ds, hidden) -> None:
        e.gemm(dtype, False, True, end - first, keys, dim_v, _row_offset(e, g, first, dim_v, dtype), dim_v, vb, dim_v,
               zero, _row_offset(e, ds, first, nk, dtype), nk)  # fmt: skip

        def row(r: ir.Value, _: list) -> list:
            i = b.add(r, ir.Constant(I64, first)) if first else r
            base = b.mul(i, ir.Constant(I64, nk))

            def dot(j: ir.Value, carried: list) -> list:
                at = b.add(base, j)
                x = e.load(ds, at, dtype)
                if keep_p is not None:
                    x = b.fmul(x, e.load(keep_p, at, dtype))
                    e.store(x, ds, at, dtype)
                w = e.load(p, at, dtype)
                if wide:  # float32 products are exact in float64: the sum is all but order-free
                    x, w = b.fpext(x, _F64_REG), b.fpext(w, _F64_REG)
                return [b.fadd(carried[0], b.fmul(x, w), flags=("reassoc",))]

            (total,) = e.loops.run(keys, dot, [const(np.dtype(np.float64), 0.0) if wide else zero])
            if wide:
                total = b.fptrunc(total, reg_type(dtype))

            def softmax_grad(j: ir.Value, _: list) -> list:
                at = b.add(base, j)
                x = b.fmul(e.load(p, at, dtype), b.fsub(e.load(ds, at, dtype), total))
                if hidden is not None:
                    x = b.select(hidden(i, j), zero, x)
                e.store(x, ds, at, dtype)
                return []

            e.loops.run(keys, softmax_grad)
            return []

        e.loops.run(end - first, row)
        _zero_tail(e, [ds], first, end, keys, nk, dtype)

    e.loops.run(blocks, block_body)


#: Operands (positions in the node's arguments) the steps read through their views.
_FORWARD_VIEWS = frozenset({3, 4})
_BACKWARD_VIEWS = frozenset({4})

#: op -> its lowering.
ATTENTION_OPS: dict[str, LibraryOp] = {
    "attention": LibraryOp(_forward_supports, _forward_scratch, _forward, views=_FORWARD_VIEWS),
    "attention_backward": LibraryOp(_backward_supports, _backward_scratch, _backward, views=_BACKWARD_VIEWS),
}

__all__ = ["ATTENTION_OPS"]
