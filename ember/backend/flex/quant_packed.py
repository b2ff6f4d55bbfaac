"""The packed dynamic-int8 GEMM of :mod:`ember.backend.flex.quant_kernels` (AVX-512 VNNI),
for many rows of ``x`` (prefill): ``y = sx sw (xq @ w.T) + bias``.

The unpacked kernels (``ember_i8i8_*``) hold a dot product per output in a register and
reduce its 16 lanes at the end; this one holds 16 outputs per register. The weight is
packed once (:func:`pack_int8`, cached per weight by :mod:`ember.backend.flex.quantized`)
into panels of 16 output columns: panel ``p`` is ``[K / 4, 16, 4]`` bytes, byte
``(g, n, j)`` holding ``w[16 p + n, 4 g + j] + 128`` (unsigned, as ``vpdpbusd`` wants its
first operand). One ``vpdpbusd`` then adds 4 values of ``k`` for 16 columns of one row
of ``x``: the 4 bytes of ``xq[m, 4g : 4g + 4]`` broadcast (an embedded broadcast operand)
against a 64-byte vector of the panel. A register tile is ``mr`` rows by ``nr`` panels
(4 x 4: 16 accumulators, 4 weight loads and 4 broadcasts per 16 ``vpdpbusd``; 6 x 4,
8 x 3 and 5 x 5 ran as fast on Zen 5, ~450 GMAC/s, its two ``vpdpbusd`` a cycle, and 4
rows pad the fewest).

Loops: for each ``nr`` panels, for each block of ``kc`` values of ``k`` (the panels'
``kc / 4`` groups, ``nr * 16 * kc`` bytes, stay in L2: 256 KiB at 4096), for each
``mr`` rows of ``x``.
Between blocks the int32 sums wait in ``y`` itself; the last block applies the
epilogue ``(acc - 128 xsum[m]) sx[m] sw[n] + bias[n]`` in place of the store.

While the row tiles pass over one block, they prefetch the next one (the same tile's
next block of ``k``, or the next tile's first), one cache line every few groups spread
over the row tiles: the weight (16 MiB at 4096 x 4096) comes from memory once per
call, and without it the first row tile of each block waited on it (128 rows x 4096:
3-5% of the kernel's time).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["PACKED_TILES", "emit_packed_int8", "pack_int8", "packed_name"]

#: Register tiles ``(rows of x, panels of 16 columns)``: the main one and one panel wide
#: for the columns left over (rows are padded to whole tiles).
PACKED_TILES = ((4, 4), (4, 1))


def packed_name(mr: int, nr: int) -> str:
    return f"ember_i8i8_packed_{mr}x{nr}"


def pack_int8(w: np.ndarray) -> np.ndarray:
    """``w`` int8 ``[N, K]`` (N a multiple of 16, K of 4) as the kernel's panels, uint8
    ``[N / 16, K / 4, 16, 4]`` of ``w + 128``."""
    n, k = w.shape
    flipped = (w.view(np.uint8) ^ np.uint8(128)).reshape(n // 16, 16, k // 4, 4)
    return np.ascontiguousarray(flipped.transpose(0, 2, 1, 3))


def emit_packed_int8(e: Any, mr: int, nr: int) -> None:
    """``ember_i8i8_packed_{mr}x{nr}(xq, wp, sx, xsum, sw, bias, y, M, N, K, ldy, kc)``:
    M a multiple of ``mr``, N of ``16 nr``, K of ``kc`` and ``kc`` of 4; ``wp`` points at
    the first panel; ``bias`` may be null; ``y`` rows are ``ldy`` floats apart."""
    ir, p = e.ir, e.ptr
    i32, i64, v16i32, v16f = e.i32, e.i64, e.v16i32, e.v16f
    args = [p, p, p, p, p, p, p, i64, i64, i64, i64, i64]
    fn, b = e.function(packed_name(mr, nr), args)
    xq, wp, sx, xsum, sw, bias, y, m_count, n_count, k_count, ldy, kc = fn.args
    has_bias = b.icmp_unsigned("!=", bias, ir.Constant(p, None))
    zero_i = ir.Constant(v16i32, [0] * 16)
    panel_bytes = b.mul(k_count, e.k64(16))
    n_tiles = b.sdiv(n_count, e.k64(16 * nr))
    k_blocks = b.sdiv(k_count, kc)
    m_tiles = b.sdiv(m_count, e.k64(mr))
    groups = b.sdiv(kc, e.k64(4))
    last_block = b.sub(k_blocks, e.k64(1))
    # The m tiles of a block share the prefetch of the next block: nr panels in 2^shift
    # parts each (shift up to 3, fewer parts where there are fewer than 8 nr m tiles).
    parts = b.sdiv(m_tiles, e.k64(nr))
    shift = e.k64(0)
    for count in (2, 4, 8):
        shift = b.select(b.icmp_signed(">=", parts, e.k64(count)), e.k64(count.bit_length() - 1), shift)
    # Few m tiles (under 2 nr: 32 rows) read the weight about once: there the prefetch
    # did not pay in our measurements (4 rows: up to 12% slower, 16: -6% to +6%), so it
    # is off; from 32 rows on it was 3-12% faster.
    prefetching = b.icmp_signed(">", parts, e.k64(1))

    def per_n_tile(b: Any, nt: Any) -> None:
        n0 = b.mul(nt, e.k64(16 * nr))
        last_tile = b.icmp_signed("==", nt, b.sub(n_tiles, e.k64(1)))
        panels = [b.mul(b.add(b.mul(nt, e.k64(nr)), e.k64(c)), panel_bytes) for c in range(nr)]
        sws = [e.vload(b, v16f, sw, b.add(n0, e.k64(16 * c)), e.f32) for c in range(nr)]
        biases = [e.optional(b, has_bias, bias, b.add(n0, e.k64(16 * c)), v16f) for c in range(nr)]

        def per_k_block(b: Any, kb: Any) -> None:
            k0 = b.mul(kb, kc)
            first = b.icmp_signed("==", kb, e.k64(0))
            last = b.icmp_signed("==", kb, last_block)
            # the panels' byte offset of this block: 16 bytes per value of k
            wk = b.mul(k0, e.k64(16))

            # The block after this one: this tile's next block of k, else the next
            # tile's first (this block again after the last tile).
            more_k = b.icmp_signed("<", kb, last_block)
            next_tile = b.select(last_tile, b.add(panels[0], wk), b.add(panels[0], b.mul(panel_bytes, e.k64(nr))))
            next_block = b.select(more_k, b.add(panels[0], b.add(wk, b.mul(kc, e.k64(16)))), next_tile)

            def per_m_tile(b: Any, mt: Any) -> None:
                m0 = b.mul(mt, e.k64(mr))
                # m tile mt prefetches part (mt / nr) % 2^shift of panel mt % nr of the
                # next block: one line every 2^shift groups
                part = b.and_(b.sdiv(mt, e.k64(nr)), b.sub(b.shl(e.k64(1), shift), e.k64(1)))
                panel_at = b.add(next_block, b.mul(b.srem(mt, e.k64(nr)), panel_bytes))
                ahead = b.add(panel_at, b.mul(b.lshr(b.mul(part, groups), shift), e.k64(64)))
                ms = [b.add(m0, e.k64(r)) for r in range(mr)]
                xrows = [b.add(b.mul(m, k_count), k0) for m in ms]
                outs = [[b.add(b.mul(m, ldy), b.add(n0, e.k64(16 * c))) for c in range(nr)] for m in ms]
                # the first block starts from zero, a later one from the sums held in y
                # (read only then: a single block never reads y)
                with b.if_else(first) as (then, otherwise):
                    with then:
                        from_zero = b.block
                    with otherwise:
                        held = [e.vload(b, v16i32, y, outs[r][c], e.f32) for r in range(mr) for c in range(nr)]
                        from_y = b.block
                init = []
                for value in held:
                    start = b.phi(v16i32)
                    start.add_incoming(zero_i, from_zero)
                    start.add_incoming(value, from_y)
                    init.append((v16i32, start))

                def per_group(b: Any, g: Any, *accs: Any, prefetch: bool = False) -> list[Any]:
                    off = b.add(wk, b.mul(g, e.k64(64)))
                    if prefetch:
                        e.prefetch(b, wp, b.add(ahead, b.mul(b.lshr(g, shift), e.k64(64))))
                    ws = [e.vload(b, e.v64i8, wp, b.add(panel, off), e.i8) for panel in panels]
                    out = list(accs)
                    for r in range(mr):
                        at = b.add(xrows[r], b.mul(g, e.k64(4)))
                        four = b.load(b.gep(xq, [at], source_etype=e.i8), typ=i32, align=1)
                        xb = b.bitcast(e.splat(b, four, v16i32), e.v64i8)
                        for c in range(nr):
                            i = r * nr + c
                            out[i] = e.call(b, "llvm.x86.avx512.vpdpbusd.512", v16i32, [out[i], ws[c], xb])
                    return out

                accs = _either(e, b, prefetching, groups, per_group, init)
                for r in range(mr):
                    xs = b.load(b.gep(xsum, [ms[r]], source_etype=i32), typ=i32, align=4)
                    flip = e.splat(b, b.shl(xs, ir.Constant(i32, 7)), v16i32)
                    sxv = e.splat(b, e.load(b, sx, ms[r]), v16f)
                    for c in range(nr):
                        acc = accs[r * nr + c]
                        done = b.fmul(b.fmul(b.sitofp(b.sub(acc, flip), v16f), sxv), sws[c])
                        done = b.bitcast(b.fadd(done, biases[c]), v16i32)
                        value = b.select(last, done, acc)
                        b.store(value, b.gep(y, [outs[r][c]], source_etype=e.f32), align=4)

            e.loop(b, m_tiles, per_m_tile)

        e.loop(b, k_blocks, per_k_block)

    e.loop(b, n_tiles, per_n_tile)
    b.ret_void()


def _either(e: Any, b: Any, prefetching: Any, count: Any, body: Any, init: list[tuple[Any, Any]]) -> list[Any]:
    """``e.loop(b, count, body, init)``, in two copies: the one whose body prefetches
    (``body(..., prefetch=True)``) where ``prefetching`` holds, the other elsewhere."""
    results = []
    with b.if_else(prefetching) as (then, otherwise):
        with then:
            ahead = e.loop(b, count, lambda b, g, *accs: body(b, g, *accs, prefetch=True), init)
            ahead_block = b.block
        with otherwise:
            plain = e.loop(b, count, body, init)
            plain_block = b.block
    for (vtype, _), one, other in zip(init, ahead, plain):
        merged = b.phi(vtype)
        merged.add_incoming(one, ahead_block)
        merged.add_incoming(other, plain_block)
        results.append(merged)
    return results
