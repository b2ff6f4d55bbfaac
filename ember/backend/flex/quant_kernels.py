"""flex's quantized GEMM kernels, written as LLVM IR and compiled once per process
through the kernel layer's JIT (:mod:`ember.backend.kernel.llvm`, as
:mod:`ember.backend.flex.native`): no kernel ever writes a whole float weight to memory.

* ``weight-only`` (``ember_q{s8,u8,u4,u4z}_gemm_{mr}x{nr}[_g32]``, emitted by
  :mod:`ember.backend.flex.quant_weight_only`): ``y = x @ dequantize(w).T + bias`` with
  ``w`` int8, uint8 or packed int4 ``[N, K]``, dequantized in registers against ``mr``
  rows of ``x`` for ``nr`` rows of ``w`` at once (a register tile).
* ``dynamic int8`` (``ember_i8i8_{vnni,portable}_{mr}x{nr}``): ``xq`` int8 ``[M, K]``
  (one scale per row) times ``w`` int8 ``[N, K]`` in int32. ``vpdpbusd`` multiplies
  unsigned by signed bytes, so the weight is flipped to ``w + 128`` in registers and
  the epilogue subtracts ``128 * sum(xq row)``; it then applies both scales and the
  bias. The portable path computes the same sums with widening multiplies.

* ``packed int8`` (``ember_i8i8_packed_{mr}x{nr}``, emitted by
  :mod:`ember.backend.flex.quant_packed`, VNNI only): the same product for many rows of
  ``x`` on a weight packed once into panels of 16 columns, 16 outputs per register.

* ``int4 x dynamic int8`` (``ember_q4i8_{vnni,portable}_{mr}x{nr}``, emitted by
  :mod:`ember.backend.flex.quant_int4_dynamic`): a symmetric int4 weight in blocks of 32
  times rows of ``x`` quantized to int8 (decode), the nibbles straight into ``vpdpbusd``.

* ``dequantize rows`` (``ember_q{s8,u8,u4}_dequant``): rows of ``w`` as float32, used for
  prefill (many rows of ``x``), a cache-sized tile of rows at a time, each tile then
  multiplied with sgemm (:mod:`ember.backend.flex.quantized`).

Rows of ``w`` are taken in blocks of :data:`N_BLOCK`, and every tile of rows of ``x``
passes over one block while it is in cache, so each weight byte comes from memory once.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["QuantKernels", "has_vnni", "quant_kernels"]

#: Rows of the weight per cache block.
N_BLOCK = 64
#: Register tiles ``(rows of x, rows of w)`` compiled: a wide one for many rows, one
#: sharing each load of ``x`` among several weight rows for decode, and ``1 x 1`` for the rest.
WEIGHT_ONLY_TILES = ((8, 1), (1, 4), (1, 1))
INT8_TILES = ((6, 4), (6, 1), (1, 4), (1, 1))
#: int4 x dynamic int8 tiles: 4 rows of ``x`` by 4 weight rows (each weight load and
#: unpack shared by 4 rows), the rest of the rows one at a time.
INT4_DYNAMIC_TILES = ((4, 4), (4, 1), (1, 4), (1, 1))

_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}


@dataclass(frozen=True)
class QuantKernels:
    """ctypes entry points: ``weight_only`` keyed ``(kind, g32, mr, nr)`` (``kind`` in
    :data:`~ember.backend.flex.quant_weight_only.WEIGHT_KINDS`, ``g32``: the variant for
    groups of 32), ``gemm`` (int8 x int8) keyed ``(kind, mr, nr)`` with ``kind`` ``vnni``
    or ``portable``, ``dequant`` keyed ``s8``/``u8``/``u4``, ``packed`` (int8 x int8 on a
    packed weight, VNNI only, :mod:`~ember.backend.flex.quant_packed`) keyed ``(mr, nr)``,
    ``int4_dynamic`` (int4 x int8, :mod:`~ember.backend.flex.quant_int4_dynamic`) keyed
    ``(kind, mr, nr)`` like ``gemm``, its activations laid out by ``prepare_int4``, and
    ``int4_linear`` keyed by ``kind``: both and every tile in one call."""

    engine: Any
    quantize_rows: Any
    weight_only: dict[tuple[str, bool, int, int], Any]
    gemm: dict[tuple[str, int, int], Any]
    dequant: dict[str, Any]
    vnni: bool
    packed: dict[tuple[int, int], Any]
    int4_dynamic: dict[tuple[str, int, int], Any]
    prepare_int4: Any
    int4_linear: dict[str, Any]


def has_vnni() -> bool:
    """Whether this CPU runs AVX-512 VNNI (``vpdpbusd`` on 512-bit vectors)."""
    try:
        from ember.backend.kernel.llvm import jit

        features = jit.host_features()
    except Exception:  # pragma: no cover - llvmlite is a runtime dependency
        return False
    return "+avx512vnni" in features and "+avx512bw" in features


def quant_kernels(portable: bool = False) -> QuantKernels | None:
    """The compiled kernels, built on first use; ``None`` where llvmlite cannot compile.

    ``portable`` builds the paths a CPU without AVX-512 VNNI and AVX-512 runs (no
    ``vpdpbusd``, no int4 table lookups) on this one too, so that tests cover them."""
    key = "portable" if portable else "kernels"
    if key in _STATE:
        return _STATE[key]
    with _LOCK:
        if key not in _STATE:
            _STATE[key] = _build(portable)
    return _STATE[key]


def _build(portable: bool) -> QuantKernels | None:
    try:
        from llvmlite import ir

        from ember.backend.flex.quant_activations import QUANTIZE_ROWS, emit_quantize_rows
        from ember.backend.flex.quant_int4_dynamic import (
            PREPARE,
            emit_int4_dynamic,
            emit_int4_linear,
            emit_prepare,
            int4_dynamic_name,
            int4_linear_name,
        )
        from ember.backend.flex.quant_packed import PACKED_TILES, emit_packed_int8, packed_name
        from ember.backend.flex.quant_weight_only import WEIGHT_KINDS, emit_weight_only, weight_only_name
        from ember.backend.kernel.llvm import jit
    except ImportError:  # pragma: no cover
        return None
    vnni = has_vnni() and not portable
    int8_kinds = ("vnni", "portable") if vnni else ("portable",)
    # int4's default block is 32: a variant without the inner loop; int8's groups are long.
    # int4 on AVX-512 looks its values up in a register (vpermps): ``lut``.
    lut = "+avx512f" in jit.host_features().split(",") and not portable
    variants = [(kind, g32) for kind in WEIGHT_KINDS for g32 in ((False, True) if kind.startswith("u4") else (False,))]
    names = [QUANTIZE_ROWS] + [f"ember_q{kind}_dequant" for kind in ("s8", "u8", "u4")]
    names += [
        weight_only_name(kind, mr, nr, g32, lut and kind.startswith("u4"))
        for kind, g32 in variants
        for mr, nr in WEIGHT_ONLY_TILES
    ]
    names += [f"ember_i8i8_{kind}_{mr}x{nr}" for kind in int8_kinds for mr, nr in INT8_TILES]
    packed_tiles = PACKED_TILES if vnni else ()
    names += [packed_name(mr, nr) for mr, nr in packed_tiles]
    names += [PREPARE] + [int4_dynamic_name(kind, mr, nr) for kind in int8_kinds for mr, nr in INT4_DYNAMIC_TILES]
    names += [int4_linear_name(kind) for kind in int8_kinds]
    try:
        emitter = _QuantEmitter(ir, jit.vector_width())
        emit_quantize_rows(emitter)
        for kind in ("s8", "u8", "u4"):
            emitter.dequantize_rows(kind)
        for kind, g32 in variants:
            for mr, nr in WEIGHT_ONLY_TILES:
                emit_weight_only(emitter, kind, mr, nr, g32, lut and kind.startswith("u4"))
        for kind in int8_kinds:
            for mr, nr in INT8_TILES:
                emitter.int8_int8(kind, mr, nr)
        for mr, nr in packed_tiles:
            emit_packed_int8(emitter, mr, nr)
        emit_prepare(emitter, emitter.module.get_global(QUANTIZE_ROWS))
        for kind in int8_kinds:
            for mr, nr in INT4_DYNAMIC_TILES:
                emit_int4_dynamic(emitter, kind, mr, nr)
            tiles = {t: emitter.module.get_global(int4_dynamic_name(kind, *t)) for t in INT4_DYNAMIC_TILES}
            emit_int4_linear(emitter, kind, emitter.module.get_global(PREPARE), tiles)
        compiled = jit.compile_module(str(emitter.module), names, unroll=True, codegen_opt=3, cache=True)
    except Exception:  # an unsupported host or llvmlite version: numpy instead
        return None
    p, i64, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
    at = compiled.addresses
    weight_only: dict[tuple[str, bool, int, int], Any] = {}
    signature = ctypes.CFUNCTYPE(None, p, p, p, p, p, p, i64, i64, i64, i64, i64)
    for kind, g32 in variants:
        for mr, nr in WEIGHT_ONLY_TILES:
            name = weight_only_name(kind, mr, nr, g32, lut and kind.startswith("u4"))
            weight_only[(kind, g32, mr, nr)] = signature(at[name])
    dequant = {
        kind: ctypes.CFUNCTYPE(None, p, p, p, p, i64, i64, i64, f32)(at[f"ember_q{kind}_dequant"])
        for kind in ("s8", "u8", "u4")
    }
    gemm: dict[tuple[str, int, int], Any] = {}
    for kind in int8_kinds:
        for mr, nr in INT8_TILES:
            signature = ctypes.CFUNCTYPE(None, p, p, p, p, p, p, p, i64, i64, i64, i64)
            gemm[(kind, mr, nr)] = signature(at[f"ember_i8i8_{kind}_{mr}x{nr}"])
    packed_signature = ctypes.CFUNCTYPE(None, p, p, p, p, p, p, p, i64, i64, i64, i64, i64)
    packed = {(mr, nr): packed_signature(at[packed_name(mr, nr)]) for mr, nr in packed_tiles}
    quantize_rows = ctypes.CFUNCTYPE(None, p, p, p, p, i64, i64, f32)(at[QUANTIZE_ROWS])
    int4_signature = ctypes.CFUNCTYPE(None, p, p, p, p, p, p, i64, i64, i64, i64)
    int4_dynamic = {
        (kind, mr, nr): int4_signature(at[int4_dynamic_name(kind, mr, nr)])
        for kind in int8_kinds
        for mr, nr in INT4_DYNAMIC_TILES
    }
    prepare_int4 = ctypes.CFUNCTYPE(None, p, p, p, p, p, i64, i64, f32)(at[PREPARE])
    linear_signature = ctypes.CFUNCTYPE(None, p, p, p, p, p, p, i64, i64, i64, f32)
    int4_linear = {kind: linear_signature(at[int4_linear_name(kind)]) for kind in int8_kinds}
    return QuantKernels(
        engine=compiled.engine,
        quantize_rows=quantize_rows,
        weight_only=weight_only,
        gemm=gemm,
        dequant=dequant,
        vnni=vnni,
        packed=packed,
        int4_dynamic=int4_dynamic,
        prepare_int4=prepare_int4,
        int4_linear=int4_linear,
    )


class _QuantEmitter:
    """Emits the kernels into one module (counted loops from the kernel layer)."""

    def __init__(self, ir: Any, width: int | None):
        self.ir = ir
        self.module = ir.Module(name="ember_flex_quant")
        self.f32 = ir.FloatType()
        self.i32 = ir.IntType(32)
        self.i64 = ir.IntType(64)
        self.i8 = ir.IntType(8)
        self.ptr = ir.PointerType()
        self.void = ir.VoidType()
        self.width = width
        self.v16f = ir.VectorType(self.f32, 16)
        self.v16i8 = ir.VectorType(self.i8, 16)
        self.v64i8 = ir.VectorType(self.i8, 64)
        self.v16i32 = ir.VectorType(self.i32, 16)
        self._intrinsics: dict[str, Any] = {}

    def function(self, name: str, args: list[Any]) -> tuple[Any, Any]:
        from ember.backend.kernel.llvm.mathlib import kernel_function

        fn = kernel_function(self.module, name, args, self.width)
        return fn, self.ir.IRBuilder(fn.append_basic_block("entry"))

    def loop(self, b: Any, count: Any, body: Any, carried: Sequence[tuple[Any, Any]] = ()) -> list[Any]:
        """``for i in range(count): carried = body(b, i, *carried)`` (a run-time count);
        returns the final carried values. ``carried`` is ``[(type, initial value)]``."""
        from ember.backend.kernel.llvm.loops import Loops

        def step(i: Any, phis: list[Any]) -> list[Any]:
            out = body(b, i, *phis)
            return list(out) if carried else []

        return Loops(b).count(count, step, [init for _, init in carried])

    def load(self, b: Any, base: Any, index: Any) -> Any:
        return b.load(b.gep(base, [index], source_etype=self.f32), typ=self.f32, align=4)

    def store(self, b: Any, value: Any, base: Any, index: Any) -> None:
        b.store(value, b.gep(base, [index], source_etype=self.f32), align=4)

    def k64(self, value: int) -> Any:
        return self.ir.Constant(self.i64, value)

    def splat(self, b: Any, value: Any, vtype: Any) -> Any:
        undef = self.ir.Constant(vtype, self.ir.Undefined)
        one = b.insert_element(undef, value, self.ir.Constant(self.i32, 0))
        zeros = self.ir.Constant(self.ir.VectorType(self.i32, vtype.count), [0] * vtype.count)
        return b.shuffle_vector(one, undef, zeros)

    def vload(self, b: Any, vtype: Any, base: Any, index: Any, elem: Any) -> Any:
        return b.load(b.gep(base, [index], source_etype=elem), typ=vtype, align=1)

    def call(self, b: Any, name: str, ret: Any, args: list[Any], fastmath: tuple[str, ...] = ()) -> Any:
        fn = self._intrinsics.get(name)
        if fn is None:
            fn = self.ir.Function(self.module, self.ir.FunctionType(ret, [a.type for a in args]), name=name)
            self._intrinsics[name] = fn
        return b.call(fn, args, fastmath=fastmath)

    def reduce_fadd(self, b: Any, v: Any) -> Any:
        """The sum of a ``<16 x float>``'s lanes, in a tree (``reassoc``: 4 dependent adds,
        not 16)."""
        zero = self.ir.Constant(self.f32, 0.0)
        return self.call(b, "llvm.vector.reduce.fadd.v16f32", self.f32, [zero, v], fastmath=("reassoc",))

    def reduce4(self, b: Any, vs: Sequence[Any], add: Any) -> Any:
        """The lane sums of four 16-lane vectors as one 4-lane vector, by halving and
        interleaving (7 shuffle pairs and adds, where four separate reductions take 16)."""
        ir, i32 = self.ir, self.i32

        def half(u: Any, v: Any, width: int) -> Any:
            """Lanes of ``u`` and ``v`` in runs of ``width``: each run's two halves added."""
            lanes = u.type.count
            runs = range(0, lanes, width)
            first = [i + j for i in runs for j in range(width // 2)]
            second = [i + width // 2 + j for i in runs for j in range(width // 2)]
            pick = [*first, *(lanes + i for i in first)], [*second, *(lanes + i for i in second)]
            a = b.shuffle_vector(u, v, ir.Constant(ir.VectorType(i32, lanes), pick[0]))
            c = b.shuffle_vector(u, v, ir.Constant(ir.VectorType(i32, lanes), pick[1]))
            return add(a, c)

        # 16 lanes each -> pairs of 8-lane partial sums (u0|u1, u2|u3), then 4 + 4 ...
        s01 = half(vs[0], vs[1], 16)
        s23 = half(vs[2], vs[3], 16)
        s = half(s01, s23, 8)  # lanes: 4 of vs[0], 4 of vs[1], 4 of vs[2], 4 of vs[3]
        quads = [
            b.shuffle_vector(s, s, ir.Constant(ir.VectorType(i32, 4), [j, 4 + j, 8 + j, 12 + j])) for j in range(4)
        ]
        return add(add(quads[0], quads[1]), add(quads[2], quads[3]))

    def prefetch(self, b: Any, base: Any, index: Any) -> None:
        """A read prefetch of byte ``index`` of ``base`` into every cache level."""
        i32 = self.i32
        args = [b.gep(base, [index], source_etype=self.i8), *(self.ir.Constant(i32, v) for v in (0, 3, 1))]
        fn = self._intrinsics.get("llvm.prefetch.p0")
        if fn is None:
            ftype = self.ir.FunctionType(self.void, [self.ptr, i32, i32, i32])
            fn = self.ir.Function(self.module, ftype, name="llvm.prefetch.p0")
            self._intrinsics["llvm.prefetch.p0"] = fn
        b.call(fn, args)

    def blocked_rows(self, b: Any, m_count: Any, n_count: Any, mr: int, nr: int, tile: Any) -> None:
        """``for nb (N_BLOCK rows of w): for mt (mr rows of x): for n in block step nr:
        tile(b, m0, n0)``; ``m_count`` a multiple of ``mr``, ``n_count`` of ``nr``."""
        blocks = b.sdiv(b.add(n_count, self.k64(N_BLOCK - 1)), self.k64(N_BLOCK))
        m_tiles = b.sdiv(m_count, self.k64(mr))

        def per_block(b: Any, nb: Any) -> None:
            n0 = b.mul(nb, self.k64(N_BLOCK))
            rest = b.sub(n_count, n0)
            small = b.icmp_signed("<", rest, self.k64(N_BLOCK))
            width = b.sdiv(b.select(small, rest, self.k64(N_BLOCK)), self.k64(nr))

            def per_tile(b: Any, mt: Any) -> None:
                m0 = b.mul(mt, self.k64(mr))
                self.loop(b, width, lambda b, i: tile(b, m0, b.add(n0, b.mul(i, self.k64(nr)))))

            self.loop(b, m_tiles, per_tile)

        self.loop(b, blocks, per_block)

    def dequantize_rows(self, kind: str) -> None:
        """``ember_q{kind}_dequant(w, s, z, out, N, K, G, zconst)``: rows of ``w`` as float32
        rows of ``out`` (``[N, K]``); for prefill, a cache-sized tile at a time."""
        ir, p = self.ir, self.ptr
        args = [p, p, p, p, self.i64, self.i64, self.i64, self.f32]
        fn, b = self.function(f"ember_q{kind}_dequant", args)
        w, s, z, out, n_count, k_count, g_count, zconst = fn.args
        groups = b.sdiv(k_count, g_count)
        steps = b.sdiv(g_count, self.k64(32))
        packed = kind == "u4"
        row_bytes = b.sdiv(k_count, self.k64(2)) if packed else k_count
        half_g = b.sdiv(g_count, self.k64(2))
        has_z = b.icmp_unsigned("!=", z, ir.Constant(p, None))
        mask = ir.Constant(self.v16i8, [15] * 16)
        four = ir.Constant(self.v16i8, [4] * 16)
        conv = b.sitofp if kind == "s8" else b.uitofp

        def per_row(b: Any, n: Any) -> None:
            wrow = b.mul(n, row_bytes)
            orow = b.mul(n, k_count)

            def per_group(b: Any, gi: Any) -> None:
                si = b.add(b.mul(n, groups), gi)
                sb = self.load(b, s, si)
                zb = self._zero_point(b, has_z, b.gep(z, [si], source_etype=self.i8), zconst)
                cb = b.fmul(b.fsub(ir.Constant(self.f32, 0.0), zb), sb)
                sv, cv = self.splat(b, sb, self.v16f), self.splat(b, cb, self.v16f)
                k_group = b.mul(gi, g_count)

                def per_step(b: Any, j: Any) -> None:
                    if packed:
                        k0 = b.add(k_group, b.mul(j, self.k64(16)))
                        k1 = b.add(k0, half_g)
                        off = b.add(b.sdiv(k_group, self.k64(2)), b.mul(j, self.k64(16)))
                        q = self.vload(b, self.v16i8, w, b.add(wrow, off), self.i8)
                        f0, f1 = b.uitofp(b.and_(q, mask), self.v16f), b.uitofp(b.lshr(q, four), self.v16f)
                    else:
                        k0 = b.add(k_group, b.mul(j, self.k64(32)))
                        k1 = b.add(k0, self.k64(16))
                        f0 = conv(self.vload(b, self.v16i8, w, b.add(wrow, k0), self.i8), self.v16f)
                        f1 = conv(self.vload(b, self.v16i8, w, b.add(wrow, k1), self.i8), self.v16f)
                    for k, f in ((k0, f0), (k1, f1)):
                        value = self.call(b, "llvm.fma.v16f32", self.v16f, [f, sv, cv])
                        b.store(value, b.gep(out, [b.add(orow, k)], source_etype=self.f32), align=4)

                self.loop(b, steps, per_step)

            self.loop(b, groups, per_group)

        self.loop(b, n_count, per_row)
        b.ret_void()

    def _zero_point(self, b: Any, has_z: Any, zp: Any, zconst: Any) -> Any:
        pre = b.block
        load_bb = b.append_basic_block("zload")
        join = b.append_basic_block("zjoin")
        b.cbranch(has_z, load_bb, join)
        b.position_at_end(load_bb)
        loaded = b.uitofp(b.load(zp, typ=self.i8, align=1), self.f32)
        b.branch(join)
        b.position_at_end(join)
        phi = b.phi(self.f32)
        phi.add_incoming(zconst, pre)
        phi.add_incoming(loaded, load_bb)
        return phi

    def optional(self, b: Any, present: Any, base: Any, index: Any, vtype: Any = None) -> Any:
        """``base[index]`` (a ``vtype`` vector from there, if given) where ``present`` (a
        pointer's test), else zeros."""
        ir = self.ir
        typ = vtype or self.f32
        pre = b.block
        load_bb = b.append_basic_block("opt_load")
        join = b.append_basic_block("opt_join")
        b.cbranch(present, load_bb, join)
        b.position_at_end(load_bb)
        loaded = b.load(b.gep(base, [index], source_etype=self.f32), typ=typ, align=4)
        b.branch(join)
        b.position_at_end(join)
        phi = b.phi(typ)
        zero = ir.Constant(typ, [0.0] * typ.count) if vtype is not None else ir.Constant(self.f32, 0.0)
        phi.add_incoming(zero, pre)
        phi.add_incoming(loaded, load_bb)
        return phi

    # ------------------------------------------------------------------ int8 x int8
    def int8_int8(self, kind: str, mr: int, nr: int) -> None:
        """``ember_i8i8_{kind}_{mr}x{nr}(xq, w, sx, xsum, sw, bias, y, M, N, K, ldy)``:
        ``y[m, n] = sx[m] sw[n] (sum_k (w[n, k] + 128) xq[m, k] - 128 xsum[m]) + bias[n]``;
        K a multiple of 64, M of ``mr``, N of ``nr``."""
        ir, p = self.ir, self.ptr
        args = [p, p, p, p, p, p, p, self.i64, self.i64, self.i64, self.i64]
        fn, b = self.function(f"ember_i8i8_{kind}_{mr}x{nr}", args)
        xq, w, sx, xsum, sw, bias, y, m_count, n_count, k_count, ldy = fn.args
        steps = b.sdiv(k_count, self.k64(64))
        has_bias = b.icmp_unsigned("!=", bias, ir.Constant(p, None))
        flip64 = ir.Constant(self.v64i8, [-128] * 64)
        zero_i = ir.Constant(self.v16i32, [0] * 16)

        def tile(b: Any, m0: Any, n0: Any) -> None:
            ns = [b.add(n0, self.k64(c)) for c in range(nr)]
            wrows = [b.mul(n, k_count) for n in ns]
            xrows = [b.mul(b.add(m0, self.k64(r)), k_count) for r in range(mr)]

            def per_step(b: Any, j: Any, *accs: Any) -> list[Any]:
                k = b.mul(j, self.k64(64))
                wus = [b.xor(self.vload(b, self.v64i8, w, b.add(row, k), self.i8), flip64) for row in wrows]
                out = list(accs)
                for r in range(mr):
                    xv = self.vload(b, self.v64i8, xq, b.add(xrows[r], k), self.i8)
                    for c in range(nr):
                        i = r * nr + c
                        if kind == "vnni":
                            out[i] = self.call(b, "llvm.x86.avx512.vpdpbusd.512", self.v16i32, [out[i], wus[c], xv])
                        else:
                            acc = out[i]
                            for part in range(4):
                                idx = ir.Constant(ir.VectorType(self.i32, 16), list(range(16 * part, 16 * part + 16)))
                                undef = ir.Constant(self.v64i8, ir.Undefined)
                                wp = b.shuffle_vector(wus[c], undef, idx)
                                xp = b.shuffle_vector(xv, undef, idx)
                                acc = b.add(acc, b.mul(b.zext(wp, self.v16i32), b.sext(xp, self.v16i32)))
                            out[i] = acc
                return out

            accs = self.loop(b, steps, per_step, [(self.v16i32, zero_i)] * (mr * nr))
            if nr == 4:  # a row's four sums in one transposing tree, its epilogue in 4 lanes
                v4f = ir.VectorType(self.f32, 4)
                swv = b.load(b.gep(sw, [n0], source_etype=self.f32), typ=v4f, align=4)
                biasv = self.optional(b, has_bias, bias, n0, v4f)
                for r in range(mr):
                    m = b.add(m0, self.k64(r))
                    four = self.reduce4(b, accs[r * nr : r * nr + 4], b.add)
                    xs = b.load(b.gep(xsum, [m], source_etype=self.i32), typ=self.i32, align=4)
                    total = b.sub(four, self.splat(b, b.shl(xs, ir.Constant(self.i32, 7)), ir.VectorType(self.i32, 4)))
                    sxv = self.splat(b, self.load(b, sx, m), v4f)
                    scaled = b.fmul(b.fmul(b.sitofp(total, v4f), sxv), swv)
                    at = b.gep(y, [b.add(b.mul(m, ldy), n0)], source_etype=self.f32)
                    b.store(b.fadd(scaled, biasv), at, align=4)
                return
            for c, n in enumerate(ns):
                bias_value = self.optional(b, has_bias, bias, n)
                swn = self.load(b, sw, n)
                for r in range(mr):
                    m = b.add(m0, self.k64(r))
                    acc = accs[r * nr + c]
                    total = self.call(b, "llvm.vector.reduce.add.v16i32", self.i32, [acc])
                    xs = b.load(b.gep(xsum, [m], source_etype=self.i32), typ=self.i32, align=4)
                    total = b.sub(total, b.shl(xs, ir.Constant(self.i32, 7)))
                    scaled = b.fmul(b.fmul(b.sitofp(total, self.f32), self.load(b, sx, m)), swn)
                    self.store(b, b.fadd(scaled, bias_value), y, b.add(b.mul(m, ldy), n))

        self.blocked_rows(b, m_count, n_count, mr, nr, tile)
        b.ret_void()
