"""Scaled dot-product attention in the online-softmax (flash) form: the lowerings of
``flash_attention`` and ``flash_attention_backward``, which :mod:`.flash_graph` puts in
place of an ``attention`` node and its ``attention_backward`` when nothing else reads
the weights. No ``[L, S]`` score matrix is stored: per ``(batch, head)`` block the
queries run in tiles of :data:`BLOCK_Q` rows and the keys in blocks of :data:`BLOCK_K`,
so a step's working set is two ``[BLOCK_Q, BLOCK_K]`` tiles whatever the length.

* forward: per query tile, over its key blocks, ``S = Q K^T`` (one ``?gemm``), the
  scores ``S * scale (+ bias)`` with hidden keys (``mask``; with ``causal`` the keys
  after the query) at ``fill``, a running maximum ``m`` and sum ``l``: the tile's
  context rows are scaled by ``exp(m_old - m_new)`` and ``exp(s - m_new) (* keep) V``
  added (one ``?gemm``); at the end each row is divided by ``l``, and its statistics
  ``(m, 1 / l)`` are saved, ``[..., L, 2]`` (``(0, 0)`` for a row whose every score is
  ``-inf``: its weights are 0, as the composite's). They stand for the logsumexp
  ``m + log(l)``, which would lose ``log(l)`` where scores are near ``finfo.min``
  (a padding bias as Hugging Face's models build it);
* backward: ``D = rowsum(dO * O)`` (float64 sums for float32), then per query tile and
  key block the weights recomputed from the saved statistics, ``P = exp(s - m) / l``;
  ``dV += (P * keep)^T dO``; ``dS = P ((dO V^T) * keep - D)``, zero at hidden keys;
  ``dQ += dS K``, ``dK += dS^T Q``; ``dQ`` and ``dK`` scaled at the end.

With ``causal`` and hidden keys at ``-inf``, a query tile visits only the key blocks
that hold a key it sees (about half the blocks of a square block are skipped). Dropout
is drawn inside the loops: element ``(i, j)`` of the block's keep mask is element
``bh * L * S + i * S + j`` of the graph's Philox draw (:mod:`ember.backend.kernel.llvm.philox`),
times its scale, the same bits in forward and backward and as the draw itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from llvmlite import ir

from ember.backend.fusion.graph import Graph, Node
from ember.backend.fusion.llvm.attention import _Block, _exp, _from_key, _hidden_test, _key, _lead
from ember.backend.fusion.llvm.emitter import Emitter, LibraryOp
from ember.backend.fusion.scalars import SymScalar
from ember.backend.kernel.llvm import philox, small_gemm
from ember.backend.kernel.llvm.mathlib import F64, I32, I64, const, reg_type
from ember.backend.kernel.llvm.small_gemm import Operand

#: Query rows per tile and keys per block (32x64, 64x128 and 128x128 were no faster).
BLOCK_Q = 64
BLOCK_K = 64

_ALIGN = 64
_F32 = np.dtype(np.float32)
#: Positions of the dropout arguments (``keep_p, keep_scale, key_lo, key_hi,
#: counter_lo, counter_hi``) in each node's arguments.
FORWARD_DROPOUT = 8
BACKWARD_DROPOUT = 14


def _align(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _regions(sizes: list[tuple[str, int]]) -> dict[str, int]:
    regions: dict[str, int] = {}
    at = 0
    for name, nbytes in sizes:
        regions[name], at = at, at + _align(nbytes)
    regions["size"] = at
    return regions


def _transposed(graph: Graph, ref: int) -> list[tuple[str, int]]:
    """A float32 block's ``[S, E]`` keys (or values) transposed, for the inline products."""
    aval = graph.avals[ref]
    return [] if aval.dtype != _F32 else [(f"t{ref}", aval.shape[-2] * aval.shape[-1] * 4)]


def _forward_scratch(graph: Graph, node: Node) -> dict[str, int]:
    item = graph.avals[node.args[0]].dtype.itemsize
    tiles = [("s", BLOCK_Q * BLOCK_K * item), ("m", BLOCK_Q * item), ("l", BLOCK_Q * item)]
    return _regions(tiles + _transposed(graph, node.args[1]))


def _backward_scratch(graph: Graph, node: Node) -> dict[str, int]:
    aq = graph.avals[node.args[0]]
    item = aq.dtype.itemsize
    tile = BLOCK_Q * BLOCK_K * item
    sizes = [("s", tile), ("dp", tile), ("d", aq.shape[-2] * item)]
    if node.args[BACKWARD_DROPOUT] is not None:
        sizes += [("pd", tile), ("kp", tile)]
    return _regions(sizes + _transposed(graph, node.args[1]) + _transposed(graph, node.args[2]))


def _supports(graph: Graph, node: Node, target: Any) -> bool:
    """The graph rewrite (:mod:`.flash_graph`) checked the node: it always lowers."""
    return getattr(target, "blas", None) is not None


# ---------------------------------------------------------------------- shared pieces
class _Shape:
    """The block's sizes and how its query tiles meet its key blocks."""

    def __init__(self, e: Emitter, q: int, v: int, causal: bool, fill: float):
        self.e = e
        (self.nq, self.dim), (self.nk, self.dim_v) = e.shape(q)[-2:], e.shape(v)[-2:]
        self.dtype = e.dtype(q)
        # Keys after the query hidden at -inf weigh exactly 0: a tile skips their blocks.
        self.skip = causal and fill == -math.inf

    def tiles(self, body: Callable[[ir.Value, int], None]) -> None:
        """``body(first_row, rows)`` per query tile (the last may be shorter)."""
        full, tail = divmod(self.nq, BLOCK_Q)
        b = self.e.b

        def run(t: ir.Value, _: list) -> list:
            body(b.mul(t, ir.Constant(I64, BLOCK_Q)), BLOCK_Q)
            return []

        if full:
            self.e.loops.run(full, run)
        if tail:
            body(ir.Constant(I64, full * BLOCK_Q), tail)

    def key_blocks(self, first: ir.Value, rows: int, body: Callable[[ir.Value, int | ir.Value], None]) -> None:
        """``body(first_key, keys)`` per key block a tile's rows see: those before
        ``min(S, first + rows)`` where causal blocks are skipped, else all of them. Whole
        blocks have :data:`BLOCK_K` keys (a constant); the last, cut at that limit, a
        run-time count (an ``i64`` value) under causal skipping, else a constant."""
        e, b = self.e, self.e.b
        block = ir.Constant(I64, BLOCK_K)

        def run(kb: ir.Value, _: list) -> list:
            body(b.mul(kb, block), BLOCK_K)
            return []

        full, tail = divmod(self.nk, BLOCK_K)
        if not self.skip:
            if full:
                e.loops.run(full, run)
            if tail:
                body(ir.Constant(I64, full * BLOCK_K), tail)
            return
        end = b.add(first, ir.Constant(I64, rows))
        limit = b.select(b.icmp_signed("<", end, ir.Constant(I64, self.nk)), end, ir.Constant(I64, self.nk))
        whole = b.udiv(limit, block)
        e.loops.count(whole, run)
        k0 = b.mul(whole, block)
        left = b.sub(limit, k0)
        with b.if_then(b.icmp_signed(">", left, ir.Constant(I64, 0))):
            body(k0, left)


def _loop(e: Emitter, n: int | ir.Value, body: Callable, carry: list | None = None) -> list:
    """``for i in range(n)`` for a constant or run-time ``n``."""
    return e.loops.run(n, body, carry) if isinstance(n, int) else e.loops.count(n, body, carry)


def _integer(e: Emitter, value: Any) -> ir.Value:
    """A 32-bit half of a Philox key or counter (an int, or a run-time scalar) as an ``i64``."""
    if type(value) is SymScalar:
        return e.b.fptoui(e.scalar(value, np.dtype(np.float64)), I64)
    return ir.Constant(I64, int(value))


def _keep(e: Emitter, drop: tuple, dtype: np.dtype, bh: ir.Value, nq: int, nk: int):
    """``keep(i, j)``: the dropout mask's scaled element (``None`` without dropout)."""
    keep_p, keep_scale, key_lo, key_hi, counter_lo, counter_hi = drop
    if keep_p is None:
        return None
    b = e.b
    key = (_integer(e, key_lo), _integer(e, key_hi))
    counter = (_integer(e, counter_lo), _integer(e, counter_hi))
    scale = None if keep_scale is None else e.scalar(keep_scale, dtype)
    base = b.mul(bh, ir.Constant(I64, nq * nk))

    def keep(i: ir.Value, j: ir.Value) -> ir.Value:
        index = b.add(base, b.add(b.mul(i, ir.Constant(I64, nk)), j))
        drawn = philox.element(b, ("bernoulli", float(keep_p), 0.0), dtype, index, key, counter)
        return drawn if scale is None else b.fmul(drawn, scale)

    return keep


def _score(e: Emitter, x: ir.Value, i: ir.Value, j: ir.Value, scale, bias_at, hidden, fill, dtype) -> ir.Value:
    """``x * scale (+ bias[i, j])``, ``fill`` where key ``j`` is hidden from query ``i``."""
    b = e.b
    s = b.fmul(x, scale)
    if bias_at is not None:
        ptr, rs, cs = bias_at
        s = b.fadd(s, e.load(ptr, b.add(b.mul(i, ir.Constant(I64, rs)), b.mul(j, ir.Constant(I64, cs))), dtype))
    if hidden is not None:
        s = b.select(hidden(i, j), fill, s)
    return s


def _product(
    e: Emitter,
    dtype: np.dtype,
    trans_a: bool,
    trans_b: bool,
    m: int | ir.Value,
    n: int | ir.Value,
    k: int | ir.Value,
    a: ir.Value,
    lda: int,
    bm: ir.Value,
    ldb: int,
    accumulate: bool,
    c: ir.Value,
    ldc: int,
) -> None:
    """``C (+)= op(A) @ op(B)`` (row-major): a float32 block of constant sizes as the
    inline register-tiled loops of :mod:`~ember.backend.kernel.llvm.small_gemm` where they
    apply and BLAS is single-threaded (the host's widest vectors, no call or packing per
    block), else the plan's ``?gemm``."""
    if isinstance(m, int) and isinstance(n, int) and isinstance(k, int) and _inline(e, dtype):
        lanes = small_gemm.lanes(e.module.vector_width)
        out = Operand(c, ldc)
        nt = trans_b and not trans_a and not accumulate
        if nt and small_gemm.emit_gemm_nt(e, m, n, k, Operand(a, lda), Operand(bm, ldb), out, lanes):
            return
        if not trans_b and m >= small_gemm.ROWS:
            rows = Operand(a, 1, lda) if trans_a else Operand(a, lda)
            if small_gemm.emit_gemm(e, m, n, k, rows, Operand(bm, ldb), out, lanes, out if accumulate else None):
                return
    beta = const(dtype, 1.0 if accumulate else 0.0)
    e.gemm(dtype, trans_a, trans_b, m, n, k, a, lda, bm, ldb, beta, c, ldc)


def _inline(e: Emitter, dtype: np.dtype) -> bool:
    """Whether :func:`_product` runs a float32 block's products inline."""
    blas = e.module.blas
    return dtype == _F32 and small_gemm.enabled() and (blas is None or blas.threads <= 1)


class _Rows:
    """``A @ B^T`` for the ``[S, E]`` rows ``B`` of one block: with inline products, ``B``
    is transposed once per block into scratch (``[E, S]``, read as ``A @ B`` by the
    register-tiled loops, where the dot-product form sums across lanes per output);
    else the product is BLAS's with ``B`` transposed."""

    def __init__(self, e: Emitter, ref: int, rows: ir.Value, n: int, width: int, dtype: np.dtype):
        self.e, self.rows, self.n, self.width, self.dtype = e, rows, n, width, dtype
        self.t = e.regions.get(f"t{ref}") if _inline(e, dtype) else None
        if self.t is not None:
            t, b = self.t, e.b

            def copy(pos: list[ir.Value]) -> None:
                j, c = pos
                value = e.load(rows, b.add(b.mul(j, ir.Constant(I64, width)), c), dtype)
                e.store(value, t, b.add(b.mul(c, ir.Constant(I64, n)), j), dtype)

            e.loops.nest([n, width], copy)

    def product(self, m: int, cols: int | ir.Value, a: ir.Value, lda: int, k0: ir.Value, c: ir.Value) -> None:
        """``C[m, cols] = A[m, E] @ B[k0:k0 + cols]^T`` (``C`` rows of :data:`BLOCK_K`)."""
        e = self.e
        if self.t is None:
            rows = _at(e, self.rows, k0, self.width, self.dtype)
            _product(e, self.dtype, False, True, m, cols, self.width, a, lda, rows, self.width, False, c, BLOCK_K)
        else:
            first = e.at(self.t, k0, self.dtype)
            _product(e, self.dtype, False, False, m, cols, self.width, a, lda, first, self.n, False, c, BLOCK_K)


def _at(e: Emitter, ptr: ir.Value, row: ir.Value, width: int, dtype: np.dtype) -> ir.Value:
    return e.at(ptr, e.b.mul(row, ir.Constant(I64, width)), dtype)


def _scale_rows(e: Emitter, ptr: ir.Value, count: int, factor: ir.Value, dtype: np.dtype) -> None:
    b = e.b
    e.span(0, count, lambda i: e.store(b.fmul(e.load(ptr, i, dtype), factor), ptr, i, dtype))


# ---------------------------------------------------------------------- forward
def _forward(e: Emitter) -> None:
    q, k, v, mask, bias, fill, scale, causal = e.node.args[:FORWARD_DROPOUT]
    drop = e.node.args[FORWARD_DROPOUT:]
    sh = _Shape(e, q, v, causal, float(fill))
    nq, nk, dim, dim_v, dtype = sh.nq, sh.nk, sh.dim, sh.dim_v, sh.dtype
    b = e.b
    t = reg_type(dtype)
    bits = I32 if dtype.itemsize == 4 else I64
    zero, one, ninf = const(dtype, 0.0), const(dtype, 1.0), const(dtype, -math.inf)
    scale_c, fill_c = const(dtype, float(scale)), const(dtype, float(fill))
    lead = _lead(e, q)
    blocks = int(np.prod(lead, dtype=np.int64))
    context, stats = e.outs
    s_tile, m_rows, l_rows = e.regions["s"], e.regions["m"], e.regions["l"]

    def block_body(bh: ir.Value, _: list) -> list:
        blk = _Block(e, bh, lead)
        qb, kb, vb = (blk.dense(e.args[r], n * w, dtype) for r, n, w in ((q, nq, dim), (k, nk, dim), (v, nk, dim_v)))
        out = blk.dense(context, nq * dim_v, dtype)
        stats_b = blk.dense(stats, 2 * nq, dtype)
        hidden = _hidden_test(e, blk, mask, causal)
        bias_at = blk.strided(bias, dtype) if bias is not None else None
        keep = _keep(e, drop, dtype, bh, nq, nk)
        keys = _Rows(e, k, kb, nk, dim, dtype)

        def tile(first: ir.Value, rows: int) -> None:
            out_t = _at(e, out, first, dim_v, dtype)
            e.fill(out_t, ir.Constant(I64, 0), rows * dim_v, zero, dtype)
            e.fill(m_rows, ir.Constant(I64, 0), rows, ninf, dtype)
            e.fill(l_rows, ir.Constant(I64, 0), rows, zero, dtype)

            def key_block(k0: ir.Value, cols: int | ir.Value) -> None:
                keys.product(rows, cols, _at(e, qb, first, dim, dtype), dim, k0, s_tile)

                def row(r: ir.Value, _: list) -> list:
                    i = b.add(first, r)
                    base = b.mul(r, ir.Constant(I64, BLOCK_K))

                    def scores(c: ir.Value, carried: list) -> list:
                        s = _score(e, e.load(s_tile, b.add(base, c), dtype), i, b.add(k0, c), scale_c, bias_at,
                                   hidden, fill_c, dtype)  # fmt: skip
                        e.store(s, s_tile, b.add(base, c), dtype)
                        key = _key(b, s, bits)
                        return [b.select(b.icmp_signed(">", key, carried[0]), key, carried[0])]

                    old = e.load(m_rows, r, dtype)
                    (peak,) = _loop(e, cols, scores, [_key(b, old, bits)])
                    new = _from_key(b, peak, t)
                    shift = b.select(b.fcmp_ordered("==", new, ninf), zero, new)
                    alpha = _exp(e, b.fsub(old, shift), dtype)

                    def expo(c: ir.Value, carried: list) -> list:
                        at = b.add(base, c)
                        p = _exp(e, b.fsub(e.load(s_tile, at, dtype), shift), dtype)
                        e.store(p if keep is None else b.fmul(p, keep(i, b.add(k0, c))), s_tile, at, dtype)
                        return [b.fadd(carried[0], p, flags=("reassoc",))]

                    (total,) = _loop(e, cols, expo, [zero])
                    e.store(b.fadd(b.fmul(e.load(l_rows, r, dtype), alpha), total), l_rows, r, dtype)
                    e.store(new, m_rows, r, dtype)
                    moved = b.and_(b.fcmp_unordered("!=", alpha, one), b.fcmp_ordered("!=", old, ninf))
                    with b.if_then(moved):  # rows with a sum so far whose maximum moved
                        _scale_rows(e, _at(e, out_t, r, dim_v, dtype), dim_v, alpha, dtype)
                    return []

                e.loops.run(rows, row)
                _product(e, dtype, False, False, rows, dim_v, cols, s_tile, BLOCK_K, _at(e, vb, k0, dim_v, dtype), dim_v,
                       True, out_t, dim_v)  # fmt: skip

            sh.key_blocks(first, rows, key_block)

            def finish(r: ir.Value, _: list) -> list:
                peak, total = e.load(m_rows, r, dtype), e.load(l_rows, r, dtype)
                empty = b.fcmp_ordered("==", peak, ninf)
                inv = b.select(empty, zero, b.fdiv(one, total))
                _scale_rows(e, _at(e, out_t, r, dim_v, dtype), dim_v, inv, dtype)
                at = b.mul(b.add(first, r), ir.Constant(I64, 2))
                e.store(b.select(empty, zero, peak), stats_b, at, dtype)
                e.store(inv, stats_b, b.add(at, ir.Constant(I64, 1)), dtype)
                return []

            e.loops.run(rows, finish)

        sh.tiles(tile)
        return []

    e.loops.run(blocks, block_body)


# ---------------------------------------------------------------------- backward
def _backward(e: Emitter) -> None:
    q, k, v, out, stats, mask, bias, fill, grad, scale, causal, need_q, need_k, need_v = e.node.args[:BACKWARD_DROPOUT]
    drop = e.node.args[BACKWARD_DROPOUT:]
    sh = _Shape(e, q, v, causal, float(fill))
    nq, nk, dim, dim_v, dtype = sh.nq, sh.nk, sh.dim, sh.dim_v, sh.dtype
    b = e.b
    zero = const(dtype, 0.0)
    scale_c, fill_c = const(dtype, float(scale)), const(dtype, float(fill))
    wide = dtype == _F32
    lead = _lead(e, q)
    blocks = int(np.prod(lead, dtype=np.int64))
    outs = iter(e.outs)
    g_q = next(outs) if need_q else None
    g_k = next(outs) if need_k else None
    g_v = next(outs) if need_v else None
    s_tile, dp_tile, d_rows = e.regions["s"], e.regions["dp"], e.regions["d"]
    pd_tile, kp_tile = e.regions.get("pd"), e.regions.get("kp")

    def block_body(bh: ir.Value, _: list) -> list:
        blk = _Block(e, bh, lead)
        qb, kb, vb = (blk.dense(e.args[r], n * w, dtype) for r, n, w in ((q, nq, dim), (k, nk, dim), (v, nk, dim_v)))
        ob, gb = blk.dense(e.args[out], nq * dim_v, dtype), blk.dense(e.args[grad], nq * dim_v, dtype)
        stats_b = blk.dense(e.args[stats], 2 * nq, dtype)
        hidden = _hidden_test(e, blk, mask, causal)
        bias_at = blk.strided(bias, dtype) if bias is not None else None
        keep = _keep(e, drop, dtype, bh, nq, nk)
        dq = blk.dense(g_q, nq * dim, dtype) if g_q is not None else None
        dk = blk.dense(g_k, nk * dim, dtype) if g_k is not None else None
        dv = blk.dense(g_v, nk * dim_v, dtype) if g_v is not None else None
        keys = _Rows(e, k, kb, nk, dim, dtype)
        values = _Rows(e, v, vb, nk, dim_v, dtype) if dq is not None or dk is not None else None
        for ptr, n in ((dq, nq * dim), (dk, nk * dim), (dv, nk * dim_v)):
            if ptr is not None:
                e.fill(ptr, ir.Constant(I64, 0), n, zero, dtype)
        if dq is not None or dk is not None:

            def dot(i: ir.Value, _: list) -> list:
                base = b.mul(i, ir.Constant(I64, dim_v))

                def term(c: ir.Value, carried: list) -> list:
                    x, y = e.load(ob, b.add(base, c), dtype), e.load(gb, b.add(base, c), dtype)
                    if wide:
                        x, y = b.fpext(x, F64), b.fpext(y, F64)
                    return [b.fadd(carried[0], b.fmul(x, y), flags=("reassoc",))]

                (total,) = e.loops.run(dim_v, term, [const(np.dtype(np.float64), 0.0) if wide else zero])
                e.store(b.fptrunc(total, reg_type(dtype)) if wide else total, d_rows, i, dtype)
                return []

            e.loops.run(nq, dot)

        def tile(first: ir.Value, rows: int) -> None:
            q_t, g_t = _at(e, qb, first, dim, dtype), _at(e, gb, first, dim_v, dtype)

            def key_block(k0: ir.Value, cols: int | ir.Value) -> None:
                keys.product(rows, cols, q_t, dim, k0, s_tile)

                def weights(r: ir.Value, _: list) -> list:
                    i = b.add(first, r)
                    base = b.mul(r, ir.Constant(I64, BLOCK_K))
                    shift = e.load(stats_b, b.mul(i, ir.Constant(I64, 2)), dtype)
                    inv = e.load(stats_b, b.add(b.mul(i, ir.Constant(I64, 2)), ir.Constant(I64, 1)), dtype)

                    def body(c: ir.Value, _: list) -> list:
                        at = b.add(base, c)
                        s = _score(e, e.load(s_tile, at, dtype), i, b.add(k0, c), scale_c, bias_at, hidden, fill_c,
                                   dtype)  # fmt: skip
                        p = b.fmul(_exp(e, b.fsub(s, shift), dtype), inv)
                        e.store(p, s_tile, at, dtype)
                        if keep is not None:
                            kp = keep(i, b.add(k0, c))
                            e.store(kp, kp_tile, at, dtype)
                            e.store(b.fmul(p, kp), pd_tile, at, dtype)
                        return []

                    _loop(e, cols, body)
                    return []

                e.loops.run(rows, weights)
                if dv is not None:
                    _product(e, dtype, True, False, cols, dim_v, rows, s_tile if keep is None else pd_tile, BLOCK_K, g_t,
                           dim_v, True, _at(e, dv, k0, dim_v, dtype), dim_v)  # fmt: skip
                if dq is None and dk is None:
                    return
                assert values is not None
                values.product(rows, cols, g_t, dim_v, k0, dp_tile)

                def scores_grad(r: ir.Value, _: list) -> list:
                    i = b.add(first, r)
                    base = b.mul(r, ir.Constant(I64, BLOCK_K))
                    d = e.load(d_rows, i, dtype)

                    def body(c: ir.Value, _: list) -> list:
                        at = b.add(base, c)
                        x = e.load(dp_tile, at, dtype)
                        if keep is not None:
                            x = b.fmul(x, e.load(kp_tile, at, dtype))
                        x = b.fmul(e.load(s_tile, at, dtype), b.fsub(x, d))
                        if hidden is not None:
                            x = b.select(hidden(i, b.add(k0, c)), zero, x)
                        e.store(x, dp_tile, at, dtype)
                        return []

                    _loop(e, cols, body)
                    return []

                e.loops.run(rows, scores_grad)
                if dq is not None:
                    _product(e, dtype, False, False, rows, dim, cols, dp_tile, BLOCK_K, _at(e, kb, k0, dim, dtype), dim, True,
                           _at(e, dq, first, dim, dtype), dim)  # fmt: skip
                if dk is not None:
                    _product(e, dtype, True, False, cols, dim, rows, dp_tile, BLOCK_K, q_t, dim, True,
                           _at(e, dk, k0, dim, dtype), dim)  # fmt: skip

            sh.key_blocks(first, rows, key_block)

        sh.tiles(tile)
        if dq is not None:
            _scale_rows(e, dq, nq * dim, scale_c, dtype)
        if dk is not None:
            _scale_rows(e, dk, nk * dim, scale_c, dtype)
        return []

    e.loops.run(blocks, block_body)


#: Operands (positions in the node's arguments) the steps read through their views.
_FORWARD_VIEWS = frozenset({3, 4})
_BACKWARD_VIEWS = frozenset({5, 6})

#: op -> its lowering.
FLASH_OPS: dict[str, LibraryOp] = {
    "flash_attention": LibraryOp(_supports, _forward_scratch, _forward, views=_FORWARD_VIEWS),
    "flash_attention_backward": LibraryOp(_supports, _backward_scratch, _backward, views=_BACKWARD_VIEWS),
}

__all__ = ["BLOCK_K", "BLOCK_Q", "FLASH_OPS"]
