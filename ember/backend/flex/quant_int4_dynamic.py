"""int4 weights times dynamic int8 activations for :mod:`ember.backend.flex.quant_kernels`:
``y = sx * sum_b sw[n, b] (sum_{k in b} xq[k] (u[n, k] - 8)) + bias`` with ``u`` the stored
nibbles of a symmetric int4 weight in blocks of 32 and ``xq`` each row of ``x`` on its
int8 grid (``max |x| / 127``, :mod:`ember.backend.flex.quant_activations`).

No weight value is ever converted to float. The int4 layout (byte ``i`` of a block holds
value ``i`` in its low nibble and ``i + 16`` in its high one) already suits
``vpdpbusd`` (unsigned bytes times signed bytes, four products per 32-bit lane): one
64-byte load is 4 blocks of a row, ``w & 15`` their values 0..15 and ``w >> 4`` their
values 16..31, lane ``l`` belonging to block ``l // 4``. :func:`emit_prepare` lays out
each row of ``xq`` the same way once per call (``xlo``: values 0..15 of each block,
``xhi``: 16..31) with ``-8 * sum`` of each lane's eight ``x`` values, which starts the
lane's sum and so removes the nibbles' offset of 8 in integers. Per 128 values and
weight row the loop is one load, a shift and two masks, two ``vpdpbusd``, one
conversion of the 16 lane sums and one FMA by the blocks' scales (4 scales, each
spread over its 4 lanes); the row's scale ``sx`` multiplies the finished sum. A register
tile of ``mr`` rows of ``x`` shares each weight load and unpack among them.

Without VNNI (``portable``) the same sums come from widening multiplies.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CHUNK",
    "CHUNK_BYTES",
    "PREPARE",
    "emit_int4_dynamic",
    "emit_int4_linear",
    "emit_prepare",
    "int4_dynamic_name",
    "int4_linear_name",
    "scratch_bytes",
]

#: Values of ``k`` per step: 4 blocks of 32, 64 bytes of a weight row.
CHUNK = 128
#: Bytes of a prepared activation row per chunk: ``xlo`` (64), ``xhi`` (64) and the 16
#: int32 starting sums (64).
CHUNK_BYTES = 192
PREPARE = "ember_q4i8_prepare"


def int4_dynamic_name(kind: str, mr: int, nr: int) -> str:
    return f"ember_q4i8_{kind}_{mr}x{nr}"


def int4_linear_name(kind: str) -> str:
    return f"ember_q4i8_{kind}_linear"


def _align(nbytes: int) -> int:
    return -(-nbytes // 64) * 64


def scratch_offsets(m: int, k: int) -> tuple[int, int, int, int]:
    """Byte offsets of ``xq``, ``sx``, ``xsum`` and the laid-out rows in the scratch of
    :func:`emit_int4_linear` (each region 64-byte aligned)."""
    sx = _align(m * k)
    xsum = sx + _align(4 * m)
    laid = xsum + _align(4 * m)
    return 0, sx, xsum, laid


def scratch_bytes(m: int, k: int) -> int:
    """The scratch :func:`emit_int4_linear` needs for ``m`` rows of ``k`` values."""
    return scratch_offsets(m, k)[3] + m * (k // CHUNK) * CHUNK_BYTES


def emit_prepare(e: Any, quantize_rows: Any) -> None:
    """``ember_q4i8_prepare(x, xq, sx, xsum, xl, M, K, static)``: the rows of float32 ``x``
    ``[M, K]`` quantized by ``quantize_rows`` (the compiled function, into ``xq``, ``sx``,
    ``xsum``), then laid out into ``xl`` ``[M, K / 128, 192]`` bytes; K a multiple of 128."""
    ir, p = e.ir, e.ptr
    fn, b = e.function(PREPARE, [p, p, p, p, p, e.i64, e.i64, e.f32])
    x, xq, sx, xsum, xl, m_count, k_count, static = fn.args
    b.call(quantize_rows, [x, xq, sx, xsum, m_count, k_count, static])
    chunks = b.sdiv(k_count, e.k64(CHUNK))
    v64 = ir.VectorType(e.i32, 64)
    lo_pick = ir.Constant(v64, [32 * (q // 16) + q % 16 for q in range(64)])
    hi_pick = ir.Constant(v64, [32 * (q // 16) + 16 + q % 16 for q in range(64)])
    v64i16 = ir.VectorType(ir.IntType(16), 64)
    v16i16 = ir.VectorType(ir.IntType(16), 16)

    def row(b: Any, m: Any) -> None:
        def chunk(b: Any, c: Any) -> None:
            at = b.add(b.mul(m, k_count), b.mul(c, e.k64(CHUNK)))
            first = e.vload(b, e.v64i8, xq, at, e.i8)
            second = e.vload(b, e.v64i8, xq, b.add(at, e.k64(64)), e.i8)
            xlo = b.shuffle_vector(first, second, lo_pick)
            xhi = b.shuffle_vector(first, second, hi_pick)
            pair = b.add(b.sext(xlo, v64i16), b.sext(xhi, v64i16))  # |sum| <= 254
            lanes = None
            for t in range(4):
                part = b.shuffle_vector(
                    pair, pair, ir.Constant(ir.VectorType(e.i32, 16), [4 * i + t for i in range(16)])
                )
                lanes = part if lanes is None else b.add(lanes, part)
            assert lanes is not None and lanes.type == v16i16
            start = b.mul(b.sext(lanes, e.v16i32), ir.Constant(e.v16i32, [-8] * 16))
            out = b.mul(b.add(b.mul(m, chunks), c), e.k64(CHUNK_BYTES))
            b.store(xlo, b.gep(xl, [out], source_etype=e.i8), align=1)
            b.store(xhi, b.gep(xl, [b.add(out, e.k64(64))], source_etype=e.i8), align=1)
            b.store(start, b.gep(xl, [b.add(out, e.k64(128))], source_etype=e.i8), align=1)

        e.loop(b, chunks, chunk)

    e.loop(b, m_count, row)
    b.ret_void()


def _dot(e: Any, b: Any, kind: str, acc: Any, unsigned: Any, signed: Any) -> Any:
    """``vpdpbusd``: each 32-bit lane of ``acc`` plus the four products of its bytes of
    ``unsigned`` (u8) and ``signed`` (s8)."""
    if kind == "vnni":
        return e.call(b, "llvm.x86.avx512.vpdpbusd.512", e.v16i32, [acc, unsigned, signed])
    ir = e.ir
    v64i32 = ir.VectorType(e.i32, 64)
    products = b.mul(b.zext(unsigned, v64i32), b.sext(signed, v64i32))
    for t in range(4):
        pick = ir.Constant(ir.VectorType(e.i32, 16), [4 * i + t for i in range(16)])
        acc = b.add(acc, b.shuffle_vector(products, products, pick))
    return acc


def emit_int4_dynamic(e: Any, kind: str, mr: int, nr: int) -> None:
    """``ember_q4i8_{kind}_{mr}x{nr}(xl, sx, w, s, bias, y, M, N, K, ldy)``: ``xl`` and
    ``sx`` from :func:`emit_prepare`, ``w`` the packed int4 weight ``[N, K / 2]``, ``s`` its
    float32 scales ``[N, K / 32]``; M a multiple of ``mr``, N of ``nr``, K of 128;
    ``bias`` may be null; ``y``'s rows are ``ldy`` apart."""
    ir, p = e.ir, e.ptr
    args = [p, p, p, p, p, p, e.i64, e.i64, e.i64, e.i64]
    fn, b = e.function(int4_dynamic_name(kind, mr, nr), args)
    xl, sx, w, s, bias, y, m_count, n_count, k_count, ldy = fn.args
    from ember.backend.flex.quant_weight_only import PREFETCH_BYTES

    chunks = b.sdiv(k_count, e.k64(CHUNK))
    row_bytes = b.sdiv(k_count, e.k64(2))
    groups = b.sdiv(k_count, e.k64(32))
    xl_row = b.mul(chunks, e.k64(CHUNK_BYTES))
    ahead = b.add(b.mul(row_bytes, e.k64(nr)), e.k64(PREFETCH_BYTES))
    has_bias = b.icmp_unsigned("!=", bias, ir.Constant(p, None))
    low = ir.Constant(e.v64i8, [15] * 64)
    four = ir.Constant(e.v64i8, [4] * 64)
    v4f = ir.VectorType(e.f32, 4)
    spread = ir.Constant(ir.VectorType(e.i32, 16), [lane // 4 for lane in range(16)])
    zero_v = ir.Constant(e.v16f, [0.0] * 16)
    fma = "llvm.fma.v16f32"

    def tile(b: Any, m0: Any, n0: Any) -> None:
        ns = [b.add(n0, e.k64(c)) for c in range(nr)]
        ms = [b.add(m0, e.k64(r)) for r in range(mr)]
        xrows = [b.mul(m, xl_row) for m in ms]
        wrows = [b.mul(n, row_bytes) for n in ns]
        srows = [b.mul(n, groups) for n in ns]

        def chunk(b: Any, c: Any, *accs: Any) -> list[Any]:
            xs = []
            for row in xrows:
                at = b.add(row, b.mul(c, e.k64(CHUNK_BYTES)))
                xs.append(
                    (
                        e.vload(b, e.v64i8, xl, at, e.i8),
                        e.vload(b, e.v64i8, xl, b.add(at, e.k64(64)), e.i8),
                        e.vload(b, e.v16i32, xl, b.add(at, e.k64(128)), e.i8),
                    )
                )
            out = list(accs)
            for j in range(nr):
                at = b.add(wrows[j], b.mul(c, e.k64(64)))
                e.prefetch(b, w, b.add(at, ahead))
                q = e.vload(b, e.v64i8, w, at, e.i8)
                lo, hi = b.and_(q, low), b.lshr(q, four)
                four_scales = e.vload(b, v4f, s, b.add(srows[j], b.mul(c, e.k64(4))), e.f32)
                scales = b.shuffle_vector(four_scales, four_scales, spread)
                for r, (xlo, xhi, start) in enumerate(xs):
                    total = _dot(e, b, kind, _dot(e, b, kind, start, lo, xlo), hi, xhi)
                    i = r * nr + j
                    out[i] = e.call(b, fma, e.v16f, [b.sitofp(total, e.v16f), scales, out[i]])
            return out

        accs = e.loop(b, chunks, chunk, [(e.v16f, zero_v)] * (mr * nr))
        for r, m in enumerate(ms):
            sxv = e.load(b, sx, m)
            row_out = b.mul(m, ldy)
            if nr == 4:  # the four sums in one transposing tree
                sums = e.reduce4(b, accs[r * nr : r * nr + 4], b.fadd)
                biasv = e.optional(b, has_bias, bias, n0, v4f)
                value = b.fadd(b.fmul(sums, e.splat(b, sxv, v4f)), biasv)
                b.store(value, b.gep(y, [b.add(row_out, n0)], source_etype=e.f32), align=4)
                continue
            for j, n in enumerate(ns):
                total = e.reduce_fadd(b, accs[r * nr + j])
                value = b.fadd(b.fmul(total, sxv), e.optional(b, has_bias, bias, n))
                e.store(b, value, y, b.add(row_out, n))

    e.blocked_rows(b, m_count, n_count, mr, nr, tile)
    b.ret_void()


def emit_int4_linear(e: Any, kind: str, prepare: Any, tiles: dict[tuple[int, int], Any]) -> None:
    """``ember_q4i8_{kind}_linear(x, scratch, w, s, bias, y, M, N, K, static)``: the whole
    product in one call: ``prepare`` (the rows of float32 ``x [M, K]`` quantized and laid
    out into ``scratch``, :func:`scratch_bytes` long), then the register tiles
    ``tiles[(mr, nr)]`` (4 x 4, 4 x 1, 1 x 4, 1 x 1) over ``y [M, N]``; ``bias`` may be null."""
    ir, p = e.ir, e.ptr
    fn, b = e.function(int4_linear_name(kind), [p, p, p, p, p, p, e.i64, e.i64, e.i64, e.f32])
    x, scratch, w, s, bias, y, m_count, n_count, k_count, static = fn.args
    i8 = e.i8

    def align(v: Any) -> Any:
        return b.mul(b.sdiv(b.add(v, e.k64(63)), e.k64(64)), e.k64(64))

    def at(base: Any, index: Any, etype: Any) -> Any:
        return b.gep(base, [index], source_etype=etype)

    sx_off = align(b.mul(m_count, k_count))
    xsum_off = b.add(sx_off, align(b.mul(m_count, e.k64(4))))
    laid_off = b.add(xsum_off, align(b.mul(m_count, e.k64(4))))
    xq, sx, xsum, laid = scratch, at(scratch, sx_off, i8), at(scratch, xsum_off, i8), at(scratch, laid_off, i8)
    b.call(prepare, [x, xq, sx, xsum, laid, m_count, k_count, static])
    m4 = b.sub(m_count, b.srem(m_count, e.k64(4)))
    n4 = b.sub(n_count, b.srem(n_count, e.k64(4)))
    laid_row = b.mul(b.sdiv(k_count, e.k64(CHUNK)), e.k64(CHUNK_BYTES))
    null = ir.Constant(p, None)
    has_bias = b.icmp_unsigned("!=", bias, null)
    for (mr, nr), fn_tile in tiles.items():
        m0, mc = (e.k64(0), m4) if mr == 4 else (m4, b.sub(m_count, m4))
        n0, nc = (e.k64(0), n4) if nr == 4 else (n4, b.sub(n_count, n4))
        bias_at = b.select(has_bias, at(bias, n0, e.f32), null)
        args = [at(laid, b.mul(m0, laid_row), i8), at(sx, m0, e.f32), at(w, b.mul(n0, b.sdiv(k_count, e.k64(2))), i8)]
        args += [at(s, b.mul(n0, b.sdiv(k_count, e.k64(32))), e.f32), bias_at]
        args += [at(y, b.add(b.mul(m0, n_count), n0), e.f32), mc, nc, k_count, n_count]
        b.call(fn_tile, args)
    b.ret_void()
