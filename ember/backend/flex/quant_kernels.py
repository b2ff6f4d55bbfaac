"""flex's quantized GEMM kernels, compiled once per process with llvmlite (as
:mod:`ember.backend.flex.native`): no kernel ever writes a float weight to memory.

* ``weight-only`` (``ember_q{s8,u8,u4}_gemm_mr{4,1}``): ``y = x @ dequantize(w).T + bias``
  with ``w`` int8, uint8 or packed int4 ``[N, K]`` and one scale (and zero point) per
  group of ``G`` values of a row. Each step loads 32 stored values (32 bytes of int8,
  16 bytes of int4: one mask and one shift unpack them), converts them to float and
  dequantizes them in registers (``q * s - z * s``, one FMA), then accumulates them
  against 4 (or 1) rows of ``x``.
* ``dynamic int8`` (``ember_i8i8_gemm_{vnni,portable}_mr{4,1}``): ``xq`` int8 ``[M, K]``
  (one scale per row) times ``w`` int8 ``[N, K]`` in int32. ``vpdpbusd`` multiplies
  unsigned by signed bytes, so the weight is flipped to ``w + 128`` in registers and
  the epilogue subtracts ``128 * sum(xq row)``; it then applies both scales and the
  bias. The portable path computes the same sums with widening multiplies.

Rows of ``w`` are taken in blocks of :data:`N_BLOCK`, and every 4-row block of ``x``
passes over one block while it is in cache, so each weight byte comes from memory once.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any

from ember.backend.flex.native import _Emitter, _host_features

__all__ = ["QuantKernels", "has_vnni", "quant_kernels"]

#: Rows of the weight per cache block.
N_BLOCK = 64
#: Rows of ``x`` per register tile.
M_TILE = 4

_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}


@dataclass(frozen=True)
class QuantKernels:
    """ctypes entry points, keyed ``(kind, mr)``; ``kind`` is ``s8``, ``u8``, ``u4``,
    ``vnni`` or ``portable``."""

    engine: Any
    gemm: dict[tuple[str, int], Any]
    vnni: bool


def has_vnni() -> bool:
    """Whether this CPU runs AVX-512 VNNI (``vpdpbusd`` on 512-bit vectors)."""
    try:
        features = _host_features()
    except Exception:  # pragma: no cover - llvmlite is a runtime dependency
        return False
    return "+avx512vnni" in features and "+avx512bw" in features


def quant_kernels() -> QuantKernels | None:
    """The compiled kernels, built on first use; ``None`` where llvmlite cannot compile."""
    if "kernels" in _STATE:
        return _STATE["kernels"]
    with _LOCK:
        if "kernels" not in _STATE:
            _STATE["kernels"] = _build()
    return _STATE["kernels"]


def _build() -> QuantKernels | None:
    try:
        import llvmlite.binding as llvm
        from llvmlite import ir
    except ImportError:  # pragma: no cover
        return None
    vnni = has_vnni()
    try:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        emitter = _QuantEmitter(ir)
        for kind in ("s8", "u8", "u4"):
            for mr in (M_TILE, 1):
                emitter.weight_only(kind, mr)
        for kind in ("vnni", "portable") if vnni else ("portable",):
            for mr in (M_TILE, 1):
                emitter.int8_int8(kind, mr)
        target = llvm.Target.from_default_triple()
        machine = target.create_target_machine(
            cpu=llvm.get_host_cpu_name(),
            features=llvm.get_host_cpu_features().flatten(),
            opt=3,
            jit=True,
            codemodel="jitdefault",
        )
        module = llvm.parse_assembly(str(emitter.module))
        module.verify()
        tuning = llvm.create_pipeline_tuning_options(speed_level=3)
        builder = llvm.create_pass_builder(machine, tuning)
        builder.getModulePassManager().run(module, builder)
        engine = llvm.create_mcjit_compiler(module, machine)
        engine.finalize_object()
    except Exception:  # an unsupported host or llvmlite version: numpy instead
        return None
    p, i64, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
    gemm: dict[tuple[str, int], Any] = {}
    for kind in ("s8", "u8", "u4"):
        for mr in (M_TILE, 1):
            address = engine.get_function_address(f"ember_q{kind}_gemm_mr{mr}")
            gemm[(kind, mr)] = ctypes.CFUNCTYPE(None, p, p, p, p, p, p, i64, i64, i64, i64, f32)(address)
    for kind in ("vnni", "portable") if vnni else ("portable",):
        for mr in (M_TILE, 1):
            address = engine.get_function_address(f"ember_i8i8_gemm_{kind}_mr{mr}")
            gemm[(kind, mr)] = ctypes.CFUNCTYPE(None, p, p, p, p, p, p, p, i64, i64, i64)(address)
    return QuantKernels(engine=engine, gemm=gemm, vnni=vnni)


class _QuantEmitter(_Emitter):
    def __init__(self, ir: Any):
        super().__init__(ir)
        self.module.name = "ember_flex_quant"
        self.i8 = ir.IntType(8)
        self.v16f = ir.VectorType(self.f32, 16)
        self.v16i8 = ir.VectorType(self.i8, 16)
        self.v64i8 = ir.VectorType(self.i8, 64)
        self.v16i32 = ir.VectorType(self.i32, 16)

    def k64(self, value: int) -> Any:
        return self.ir.Constant(self.i64, value)

    def splat(self, b: Any, value: Any, vtype: Any) -> Any:
        undef = self.ir.Constant(vtype, self.ir.Undefined)
        one = b.insert_element(undef, value, self.ir.Constant(self.i32, 0))
        zeros = self.ir.Constant(self.ir.VectorType(self.i32, vtype.count), [0] * vtype.count)
        return b.shuffle_vector(one, undef, zeros)

    def vload(self, b: Any, vtype: Any, base: Any, index: Any, elem: Any) -> Any:
        return b.load(b.gep(base, [index], source_etype=elem), typ=vtype, align=1)

    def call(self, b: Any, name: str, ret: Any, args: list[Any]) -> Any:
        fn = self._intrinsics.get(name)
        if fn is None:
            fn = self.ir.Function(self.module, self.ir.FunctionType(ret, [a.type for a in args]), name=name)
            self._intrinsics[name] = fn
        return b.call(fn, args)

    def blocked_rows(self, b: Any, m_count: Any, n_count: Any, mr: int, row: Any) -> None:
        """``for nb (N_BLOCK rows of w): for mb (mr rows of x): for n in block: row(b, m0, n)``."""
        blocks = b.sdiv(b.add(n_count, self.k64(N_BLOCK - 1)), self.k64(N_BLOCK))
        m_tiles = b.sdiv(m_count, self.k64(mr))

        def per_block(b: Any, nb: Any) -> None:
            n0 = b.mul(nb, self.k64(N_BLOCK))
            rest = b.sub(n_count, n0)
            small = b.icmp_signed("<", rest, self.k64(N_BLOCK))
            width = b.select(small, rest, self.k64(N_BLOCK))

            def per_tile(b: Any, mt: Any) -> None:
                m0 = b.mul(mt, self.k64(mr))
                self.loop(b, width, lambda b, i: row(b, m0, b.add(n0, i)))

            self.loop(b, m_tiles, per_tile)

        self.loop(b, blocks, per_block)

    # ------------------------------------------------------------------ weight-only
    def weight_only(self, kind: str, mr: int) -> None:
        """``ember_q{kind}_gemm_mr{mr}(x, w, s, z, bias, y, M, N, K, G, zconst)``; M a
        multiple of ``mr``, G a multiple of 32, ``z``/``bias`` may be null."""
        ir, p = self.ir, self.ptr
        fn, b = self.function(f"ember_q{kind}_gemm_mr{mr}", [p, p, p, p, p, p, self.i64, self.i64, self.i64,
                                                              self.i64, self.f32])
        x, w, s, z, bias, y, m_count, n_count, k_count, g_count, zconst = fn.args
        groups = b.sdiv(k_count, g_count)
        steps = b.sdiv(g_count, self.k64(32))
        packed = kind == "u4"
        row_bytes = b.sdiv(k_count, self.k64(2)) if packed else k_count
        zero_v = ir.Constant(self.v16f, [0.0] * 16)
        has_z = b.icmp_unsigned("!=", z, ir.Constant(p, None))
        has_bias = b.icmp_unsigned("!=", bias, ir.Constant(p, None))
        mask = ir.Constant(self.v16i8, [15] * 16)
        four = ir.Constant(self.v16i8, [4] * 16)
        fma = "llvm.fma.v16f32"

        def row(b: Any, m0: Any, n: Any) -> None:
            def per_group(b: Any, gi: Any, *accs: Any) -> list[Any]:
                si = b.add(b.mul(n, groups), gi)
                sb = self.load(b, s, si)
                zp = b.gep(z, [si], source_etype=self.i8)
                # a select cannot skip the load: load from z only when it is set
                zb = self._zero_point(b, has_z, zp, zconst)
                cb = b.fmul(b.fsub(ir.Constant(self.f32, 0.0), zb), sb)
                sv, cv = self.splat(b, sb, self.v16f), self.splat(b, cb, self.v16f)
                k_group = b.mul(gi, g_count)

                def per_step(b: Any, j: Any, *accs: Any) -> list[Any]:
                    if packed:
                        off = b.add(b.add(b.mul(n, row_bytes), b.sdiv(k_group, self.k64(2))), b.mul(j, self.k64(16)))
                        q = self.vload(b, self.v16i8, w, off, self.i8)
                        q0, q1 = b.and_(q, mask), b.lshr(q, four)
                        k0 = b.add(k_group, b.mul(j, self.k64(16)))
                        k1 = b.add(k0, b.sdiv(g_count, self.k64(2)))
                        f0, f1 = b.uitofp(q0, self.v16f), b.uitofp(q1, self.v16f)
                    else:
                        k0 = b.add(k_group, b.mul(j, self.k64(32)))
                        k1 = b.add(k0, self.k64(16))
                        base = b.mul(n, row_bytes)
                        q0 = self.vload(b, self.v16i8, w, b.add(base, k0), self.i8)
                        q1 = self.vload(b, self.v16i8, w, b.add(base, k1), self.i8)
                        conv = b.sitofp if kind == "s8" else b.uitofp
                        f0, f1 = conv(q0, self.v16f), conv(q1, self.v16f)
                    w0 = self.call(b, fma, self.v16f, [f0, sv, cv])
                    w1 = self.call(b, fma, self.v16f, [f1, sv, cv])
                    out = []
                    for r in range(mr):
                        xrow = b.mul(b.add(m0, self.k64(r)), k_count)
                        x0 = self.vload(b, self.v16f, x, b.add(xrow, k0), self.f32)
                        x1 = self.vload(b, self.v16f, x, b.add(xrow, k1), self.f32)
                        out.append(self.call(b, fma, self.v16f, [x0, w0, accs[2 * r]]))
                        out.append(self.call(b, fma, self.v16f, [x1, w1, accs[2 * r + 1]]))
                    return out

                return self.loop(b, steps, per_step, [(self.v16f, a) for a in accs])

            accs = self.loop(b, groups, per_group, [(self.v16f, zero_v)] * (2 * mr))
            bias_value = self._optional(b, has_bias, bias, n)
            for r in range(mr):
                total = b.fadd(accs[2 * r], accs[2 * r + 1])
                red = self.call(b, "llvm.vector.reduce.fadd.v16f32", self.f32, [ir.Constant(self.f32, 0.0), total])
                out = b.fadd(red, bias_value)
                self.store(b, out, y, b.add(b.mul(b.add(m0, self.k64(r)), n_count), n))

        self.blocked_rows(b, m_count, n_count, mr, row)
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

    def _optional(self, b: Any, present: Any, base: Any, index: Any) -> Any:
        pre = b.block
        load_bb = b.append_basic_block("opt_load")
        join = b.append_basic_block("opt_join")
        b.cbranch(present, load_bb, join)
        b.position_at_end(load_bb)
        loaded = self.load(b, base, index)
        b.branch(join)
        b.position_at_end(join)
        phi = b.phi(self.f32)
        phi.add_incoming(self.ir.Constant(self.f32, 0.0), pre)
        phi.add_incoming(loaded, load_bb)
        return phi

    # ------------------------------------------------------------------ int8 x int8
    def int8_int8(self, kind: str, mr: int) -> None:
        """``ember_i8i8_gemm_{kind}_mr{mr}(xq, w, sx, xsum, sw, bias, y, M, N, K)``:
        ``y[m, n] = sx[m] sw[n] (sum_k (w[n, k] + 128) xq[m, k] - 128 xsum[m]) + bias[n]``;
        K a multiple of 64."""
        ir, p = self.ir, self.ptr
        fn, b = self.function(f"ember_i8i8_gemm_{kind}_mr{mr}", [p, p, p, p, p, p, p, self.i64, self.i64, self.i64])
        xq, w, sx, xsum, sw, bias, y, m_count, n_count, k_count = fn.args
        steps = b.sdiv(k_count, self.k64(64))
        has_bias = b.icmp_unsigned("!=", bias, ir.Constant(p, None))
        flip64 = ir.Constant(self.v64i8, [-128] * 64)
        zero_i = ir.Constant(self.v16i32, [0] * 16)

        def row(b: Any, m0: Any, n: Any) -> None:
            wrow = b.mul(n, k_count)

            def per_step(b: Any, j: Any, *accs: Any) -> list[Any]:
                k = b.mul(j, self.k64(64))
                wu = b.xor(self.vload(b, self.v64i8, w, b.add(wrow, k), self.i8), flip64)
                out = []
                for r in range(mr):
                    xrow = b.mul(b.add(m0, self.k64(r)), k_count)
                    xv = self.vload(b, self.v64i8, xq, b.add(xrow, k), self.i8)
                    if kind == "vnni":
                        out.append(self.call(b, "llvm.x86.avx512.vpdpbusd.512", self.v16i32, [accs[r], wu, xv]))
                    else:
                        acc = accs[r]
                        for part in range(4):
                            idx = ir.Constant(ir.VectorType(self.i32, 16), list(range(16 * part, 16 * part + 16)))
                            wp = b.shuffle_vector(wu, ir.Constant(self.v64i8, ir.Undefined), idx)
                            xp = b.shuffle_vector(xv, ir.Constant(self.v64i8, ir.Undefined), idx)
                            acc = b.add(acc, b.mul(b.zext(wp, self.v16i32), b.sext(xp, self.v16i32)))
                        out.append(acc)
                return out

            accs = self.loop(b, steps, per_step, [(self.v16i32, zero_i)] * mr)
            bias_value = self._optional(b, has_bias, bias, n)
            swn = self.load(b, sw, n)
            for r in range(mr):
                m = b.add(m0, self.k64(r))
                total = self.call(b, "llvm.vector.reduce.add.v16i32", self.i32, [accs[r]])
                xs = b.load(b.gep(xsum, [m], source_etype=self.i32), typ=self.i32, align=4)
                total = b.sub(total, b.shl(xs, ir.Constant(self.i32, 7)))
                scaled = b.fmul(b.fmul(b.sitofp(total, self.f32), self.load(b, sx, m)), swn)
                self.store(b, b.fadd(scaled, bias_value), y, b.add(b.mul(m, n_count), n))

        self.blocked_rows(b, m_count, n_count, mr, row)
        b.ret_void()
