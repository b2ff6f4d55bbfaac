"""The weight-only GEMM/GEMV kernels of :mod:`ember.backend.flex.quant_kernels`:
``y = x @ dequantize(w).T + bias`` with ``w`` int8, uint8 or packed int4 ``[N, K]`` and
one scale (and zero point) per group of ``G`` values of a row.

Each step reads 32 stored values of ``nr`` weight rows (32 bytes of int8, 16 bytes of
int4) and prefetches the bytes :data:`PREFETCH_BYTES` past the same bytes of the next
tile's rows (``nr`` rows on), so each row's bytes are on their way from memory before
they are read. The zero point comes off in
integers (int4: ``u - z`` fits a byte, so one byte subtract per 16 values; uint8: a
32-bit subtract), the values convert to float and multiply ``mr`` rows of ``x``, and
the scale is factored out of the group: per group and register-tile entry
``acc += s * sum_k x[k] (q[k] - z)``, one FMA per group instead of one per value. A
group of 32 (int4's default block) is compiled as its own variant without the inner
loop. The row sums at the end reduce in a tree (``reassoc``), not lane by lane.
"""

from __future__ import annotations

from typing import Any

__all__ = ["WEIGHT_KINDS", "emit_weight_only", "weight_only_name"]

#: How far past the same byte of the next tile's rows each step prefetches: decode reads
#: a model's weights once per token from memory, and one tile ahead (1.5 KiB for 4 rows
#: of 768 int4 values) is less than the memory's latency covers. 6 KiB further took the
#: int4 GEMVs of a 12-layer 768-wide decoder from 4.48 to 3.43 ms a token (0 to 16 KiB
#: tried; 4-12 KiB alike).
PREFETCH_BYTES = 6144

#: ``s8`` int8 symmetric, ``u8`` uint8 with zero points, ``u4`` int4 symmetric (nibble
#: ``u`` means ``u - 8``), ``u4z`` int4 with zero points.
WEIGHT_KINDS = ("s8", "u8", "u4", "u4z")


def weight_only_name(kind: str, mr: int, nr: int, g32: bool, lut: bool = False) -> str:
    return f"ember_q{kind}_gemm_{mr}x{nr}" + ("_g32" if g32 else "") + ("_lut" if lut else "")


def emit_weight_only(e: Any, kind: str, mr: int, nr: int, g32: bool, lut: bool = False) -> None:
    """``name(x, w, s, z, bias, y, M, N, K, G, ldy)``: M a multiple of ``mr``, N of ``nr``,
    G of 32 (``g32``: G is 32); ``z`` is read by ``u8``/``u4z`` only; ``bias`` may be
    null; ``y``'s rows are ``ldy`` apart. ``lut`` (int4 on AVX-512): each group's 16
    dequantized values ``(u - z) s`` in one register, the nibbles looked up in it
    (``vpermps``), see :func:`_emit_lut`."""
    if lut:
        _emit_lut(e, kind, mr, nr, g32)
        return
    ir, p = e.ir, e.ptr
    args = [p, p, p, p, p, p, e.i64, e.i64, e.i64, e.i64, e.i64]
    fn, b = e.function(weight_only_name(kind, mr, nr, g32), args)
    x, w, s, z, bias, y, m_count, n_count, k_count, g_count, ldy = fn.args
    groups = b.sdiv(k_count, g_count)
    packed = kind in ("u4", "u4z")
    row_bytes = b.sdiv(k_count, e.k64(2)) if packed else k_count
    steps = None if g32 else b.sdiv(g_count, e.k64(32))
    half_g = b.sdiv(g_count, e.k64(2))
    ahead = b.add(b.mul(row_bytes, e.k64(nr)), e.k64(PREFETCH_BYTES))  # see PREFETCH_BYTES
    zero_v = ir.Constant(e.v16f, [0.0] * 16)
    has_bias = b.icmp_unsigned("!=", bias, ir.Constant(p, None))
    fma = "llvm.fma.v16f32"
    v16i32 = e.v16i32

    def tile(b: Any, m0: Any, n0: Any) -> None:
        ns = [b.add(n0, e.k64(c)) for c in range(nr)]
        xrows = [b.mul(b.add(m0, e.k64(r)), k_count) for r in range(mr)]
        wrows = [b.mul(n, row_bytes) for n in ns]
        srows = [b.mul(n, groups) for n in ns]

        def per_group(b: Any, gi: Any, *accs: Any) -> list[Any]:
            svs = [e.splat(b, e.load(b, s, b.add(row, gi)), e.v16f) for row in srows]
            zvs: list[Any] = []
            for row in srows:
                if kind == "u4":
                    zvs.append(ir.Constant(e.v16i8, [8] * 16))
                elif kind == "u4z":
                    zb = b.load(b.gep(z, [b.add(row, gi)], source_etype=e.i8), typ=e.i8, align=1)
                    zvs.append(e.splat(b, zb, e.v16i8))
                elif kind == "u8":
                    zb = b.load(b.gep(z, [b.add(row, gi)], source_etype=e.i8), typ=e.i8, align=1)
                    zvs.append(e.splat(b, b.zext(zb, e.i32), v16i32))
            k_group = b.mul(gi, g_count)
            byte_group = b.sdiv(k_group, e.k64(2)) if packed else k_group

            def decode(b: Any, c: Any, off: Any) -> tuple[Any, Any]:
                """The 32 values at byte ``off`` of weight row ``c``, zero point removed, as float."""
                at = b.add(wrows[c], off)
                e.prefetch(b, w, b.add(at, ahead))
                if packed:
                    q = e.vload(b, e.v16i8, w, at, e.i8)
                    lo = b.and_(q, ir.Constant(e.v16i8, [15] * 16))
                    hi = b.lshr(q, ir.Constant(e.v16i8, [4] * 16))
                    return b.sitofp(b.sub(lo, zvs[c]), e.v16f), b.sitofp(b.sub(hi, zvs[c]), e.v16f)
                q0 = e.vload(b, e.v16i8, w, at, e.i8)
                q1 = e.vload(b, e.v16i8, w, b.add(at, e.k64(16)), e.i8)
                if kind == "s8":
                    return b.sitofp(q0, e.v16f), b.sitofp(q1, e.v16f)
                i0 = b.sub(b.zext(q0, v16i32), zvs[c])
                i1 = b.sub(b.zext(q1, v16i32), zvs[c])
                return b.sitofp(i0, e.v16f), b.sitofp(i1, e.v16f)

            def step(b: Any, j: Any, ts: list[Any] | None) -> list[Any]:
                """One step of 32 values; ``ts`` the partial sums (``None``: the first)."""
                if packed:  # byte i of a group holds values i and i + G/2
                    k0 = b.add(k_group, b.mul(j, e.k64(16)))
                    k1 = b.add(k0, half_g)
                    off = b.add(byte_group, b.mul(j, e.k64(16)))
                else:
                    k0 = b.add(k_group, b.mul(j, e.k64(32)))
                    k1 = b.add(k0, e.k64(16))
                    off = k0
                fs = [decode(b, c, off) for c in range(nr)]
                out: list[Any] = []
                for r in range(mr):
                    x0 = e.vload(b, e.v16f, x, b.add(xrows[r], k0), e.f32)
                    x1 = e.vload(b, e.v16f, x, b.add(xrows[r], k1), e.f32)
                    for c in range(nr):
                        if ts is None:  # one sum: x0 f0 + x1 f1
                            out.append(e.call(b, fma, e.v16f, [x1, fs[c][1], b.fmul(x0, fs[c][0])]))
                        else:
                            i = 2 * (r * nr + c)
                            out.append(e.call(b, fma, e.v16f, [x0, fs[c][0], ts[i]]))
                            out.append(e.call(b, fma, e.v16f, [x1, fs[c][1], ts[i + 1]]))
                return out

            if g32:
                sums = step(b, e.k64(0), None)
            else:
                parts = e.loop(b, steps, lambda b, j, *ts: step(b, j, list(ts)), [(e.v16f, zero_v)] * (2 * mr * nr))
                sums = [b.fadd(parts[2 * i], parts[2 * i + 1]) for i in range(mr * nr)]
            return [e.call(b, fma, e.v16f, [sums[i], svs[i % nr], accs[i]]) for i in range(mr * nr)]

        accs = e.loop(b, groups, per_group, [(e.v16f, zero_v)] * (mr * nr))
        for c, n in enumerate(ns):
            bias_value = e.optional(b, has_bias, bias, n)
            for r in range(mr):
                total = e.reduce_fadd(b, accs[r * nr + c])
                e.store(b, b.fadd(total, bias_value), y, b.add(b.mul(b.add(m0, e.k64(r)), ldy), n))

    e.blocked_rows(b, m_count, n_count, mr, nr, tile)
    b.ret_void()


def _emit_lut(e: Any, kind: str, mr: int, nr: int, g32: bool) -> None:
    """int4 by table: per group and weight row, the 16 values a nibble can mean,
    ``(i - z) * s`` for ``i`` in 0..15 (one multiply), held in one register; each
    step widens 16 bytes to 32-bit lanes once, and ``vpermps`` reads the low nibbles
    (it uses the low 4 bits of each lane) and, after one shift, the high ones. The
    values equal the float32 dequantization exactly, and no conversion or per-value
    scale is left in the loop: two FMAs per 32 values and row."""
    ir, p = e.ir, e.ptr
    args = [p, p, p, p, p, p, e.i64, e.i64, e.i64, e.i64, e.i64]
    fn, b = e.function(weight_only_name(kind, mr, nr, g32, True), args)
    x, w, s, z, bias, y, m_count, n_count, k_count, g_count, ldy = fn.args
    groups = b.sdiv(k_count, g_count)
    row_bytes = b.sdiv(k_count, e.k64(2))
    steps = None if g32 else b.sdiv(g_count, e.k64(32))
    half_g = b.sdiv(g_count, e.k64(2))
    ahead = b.add(b.mul(row_bytes, e.k64(nr)), e.k64(PREFETCH_BYTES))
    zero_v = ir.Constant(e.v16f, [0.0] * 16)
    has_bias = b.icmp_unsigned("!=", bias, ir.Constant(p, None))
    fma = "llvm.fma.v16f32"
    perm = "llvm.x86.avx512.permvar.sf.512"
    four = ir.Constant(e.v16i32, [4] * 16)
    offset = 8 if kind == "u4" else 0
    iota = ir.Constant(e.v16f, [float(i - offset) for i in range(16)])

    def tile(b: Any, m0: Any, n0: Any) -> None:
        ns = [b.add(n0, e.k64(c)) for c in range(nr)]
        xrows = [b.mul(b.add(m0, e.k64(r)), k_count) for r in range(mr)]
        wrows = [b.mul(n, row_bytes) for n in ns]
        srows = [b.mul(n, groups) for n in ns]

        def per_group(b: Any, gi: Any, *accs: Any) -> list[Any]:
            tables = []
            for row in srows:
                sv = e.splat(b, e.load(b, s, b.add(row, gi)), e.v16f)
                levels = iota
                if kind == "u4z":
                    zb = b.load(b.gep(z, [b.add(row, gi)], source_etype=e.i8), typ=e.i8, align=1)
                    levels = b.fsub(iota, e.splat(b, b.uitofp(zb, e.f32), e.v16f))
                tables.append(b.fmul(levels, sv))
            k_group = b.mul(gi, g_count)
            byte_group = b.sdiv(k_group, e.k64(2))

            def step(b: Any, j: Any, *accs: Any) -> list[Any]:
                k0 = b.add(k_group, b.mul(j, e.k64(16)))
                k1 = b.add(k0, half_g)
                off = b.add(byte_group, b.mul(j, e.k64(16)))
                fs = []
                for c in range(nr):
                    at = b.add(wrows[c], off)
                    e.prefetch(b, w, b.add(at, ahead))
                    idx = b.zext(e.vload(b, e.v16i8, w, at, e.i8), e.v16i32)
                    fs.append(
                        (
                            e.call(b, perm, e.v16f, [tables[c], idx]),
                            e.call(b, perm, e.v16f, [tables[c], b.lshr(idx, four)]),
                        )
                    )
                out = list(accs)
                for r in range(mr):
                    x0 = e.vload(b, e.v16f, x, b.add(xrows[r], k0), e.f32)
                    x1 = e.vload(b, e.v16f, x, b.add(xrows[r], k1), e.f32)
                    for c in range(nr):
                        i = 2 * (r * nr + c)
                        out[i] = e.call(b, fma, e.v16f, [x0, fs[c][0], out[i]])
                        out[i + 1] = e.call(b, fma, e.v16f, [x1, fs[c][1], out[i + 1]])
                return out

            if g32:
                return step(b, e.k64(0), *accs)
            return e.loop(b, steps, step, [(e.v16f, a) for a in accs])

        accs = e.loop(b, groups, per_group, [(e.v16f, zero_v)] * (2 * mr * nr))
        for c, n in enumerate(ns):
            bias_value = e.optional(b, has_bias, bias, n)
            for r in range(mr):
                i = 2 * (r * nr + c)
                total = e.reduce_fadd(b, b.fadd(accs[i], accs[i + 1]))
                e.store(b, b.fadd(total, bias_value), y, b.add(b.mul(b.add(m0, e.k64(r)), ldy), n))

    e.blocked_rows(b, m_count, n_count, mr, nr, tile)
    b.ret_void()
