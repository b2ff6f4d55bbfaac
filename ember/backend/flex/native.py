"""flex's native kernels: the few float32 loops whose numpy form costs many passes
over memory (exact GELU and its gradient, row softmax, layer norm and its gradient),
compiled once per process with llvmlite (a runtime dependency) for the host CPU, so
that the loop vectoriser widens them to its SIMD width.

Each kernel takes contiguous float32 arrays. :func:`kernels` returns ``None`` when
llvmlite cannot compile for this machine (or ``EMBER_FLEX_NATIVE=0``), and for arrays
too small to repay the compilation (:data:`MIN_ELEMENTS`); flex then runs its numpy
versions of the same formulas. The math matches those versions:
GELU through Abramowitz & Stegun 7.1.26 for the normal tail, ``exp`` by range
reduction ``x = n ln 2 + r`` (two-part ``ln 2``), a degree-7 Taylor polynomial in
``r`` and ``2^n`` built in the exponent bits as two halves; within about one float32
ulp, with results below the smallest normal float flushed to 0.
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Environment variable: ``0`` turns the native kernels off (numpy only).
NATIVE_ENV = "EMBER_FLEX_NATIVE"

_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}
_F32 = np.dtype(np.float32)

# Abramowitz & Stegun 7.1.26 for the normal tail Q(z) = erfc(z / sqrt 2) / 2 (see special.py).
_P_NORMAL = 0.3275911 * math.sqrt(0.5)
_B = tuple(a / 2 for a in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429))
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@dataclass(frozen=True)
class Kernels:
    """ctypes entry points of the compiled kernels (and the engine that owns them)."""

    engine: Any
    gelu: Any
    gelu_backward: Any
    softmax_rows: Any
    layer_norm: Any
    layer_norm_backward: Any


#: Arrays with fewer elements run the numpy versions: compiling the kernels costs about
#: half a second once per process, which small tensors would not win back.
MIN_ELEMENTS = 16384


def kernels(size: int | None = None) -> Kernels | None:
    """The compiled kernels, built on first use; ``None`` where they cannot be, or for
    an array of ``size`` elements below :data:`MIN_ELEMENTS`."""
    if size is not None and size < MIN_ELEMENTS:
        return None
    if "kernels" in _STATE:
        return _STATE["kernels"]
    with _LOCK:
        if "kernels" not in _STATE:
            _STATE["kernels"] = _build() if os.environ.get(NATIVE_ENV, "1") != "0" else None
    return _STATE["kernels"]


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


# ---------------------------------------------------------------------- IR


def _build() -> Kernels | None:
    try:
        import llvmlite.binding as llvm
        from llvmlite import ir
    except ImportError:  # pragma: no cover - llvmlite is a runtime dependency
        return None
    try:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        text = _module(ir)
        target = llvm.Target.from_default_triple()
        features = llvm.get_host_cpu_features().flatten()
        machine = target.create_target_machine(
            cpu=llvm.get_host_cpu_name(), features=features, opt=3, jit=True, codemodel="jitdefault"
        )
        module = llvm.parse_assembly(text)
        module.verify()
        tuning = llvm.create_pipeline_tuning_options(speed_level=3)
        tuning.loop_vectorization = True
        tuning.slp_vectorization = True
        builder = llvm.create_pass_builder(machine, tuning)
        builder.getModulePassManager().run(module, builder)
        engine = llvm.create_mcjit_compiler(module, machine)
        engine.finalize_object()
    except Exception:  # an unsupported host or llvmlite version: numpy instead
        return None
    p, i64, f32, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int32

    def fn(name: str, *args: Any) -> Any:
        return ctypes.CFUNCTYPE(None, *args)(engine.get_function_address(name))

    return Kernels(
        engine=engine,
        gelu=fn("ember_gelu", p, p, i64),
        gelu_backward=fn("ember_gelu_backward", p, p, p, i64),
        softmax_rows=fn("ember_softmax_rows", p, p, i64, i64, i32),
        layer_norm=fn("ember_layer_norm", p, p, p, p, p, p, i64, i64, f32),
        layer_norm_backward=fn("ember_layer_norm_backward", p, p, p, p, p, p, p, p, i64, i64, i32),
    )


class _Emitter:
    """Emits the kernels into one module."""

    def __init__(self, ir: Any):
        self.ir = ir
        self.module = ir.Module(name="ember_flex_native")
        self.f32 = ir.FloatType()
        self.i32 = ir.IntType(32)
        self.i64 = ir.IntType(64)
        self.ptr = ir.PointerType()
        self.void = ir.VoidType()
        self._intrinsics: dict[str, Any] = {}
        self.width: int | None
        if "+avx512f" in _host_features():
            self.width = 512
        else:
            self.width = None

    def c(self, value: float) -> Any:
        return self.ir.Constant(self.f32, value)

    def intr(self, b: Any, name: str, *args: Any) -> Any:
        fn = self._intrinsics.get(name)
        if fn is None:
            fn = self.module.declare_intrinsic(name, [self.f32], self.ir.FunctionType(self.f32, [self.f32] * len(args)))
            self._intrinsics[name] = fn
        return b.call(fn, list(args))

    def function(self, name: str, args: list[Any]) -> tuple[Any, Any]:
        fn = self.ir.Function(self.module, self.ir.FunctionType(self.void, args), name=name)
        for i, arg in enumerate(fn.args):
            if args[i] is self.ptr:
                arg.add_attribute("noalias")
        fn.attributes.add("nounwind")
        if self.width:
            set.add(fn.attributes, f'"prefer-vector-width"="{self.width}"')  # a string attribute llvmlite does not list
        return fn, self.ir.IRBuilder(fn.append_basic_block("entry"))

    def loop(self, b: Any, count: Any, body: Any, carried: Sequence[tuple[Any, Any]] = ()) -> list[Any]:
        """``for i in range(count): carried = body(b, i, *carried)``; returns the final
        carried values (reductions). ``carried`` is ``[(type, initial value)]``."""
        ir = self.ir
        pre = b.block
        head = b.append_basic_block("loop")
        done = b.append_basic_block("done")
        start_empty = b.icmp_signed("<=", count, ir.Constant(self.i64, 0))
        b.cbranch(start_empty, done, head)
        b.position_at_end(head)
        i = b.phi(self.i64)
        i.add_incoming(ir.Constant(self.i64, 0), pre)
        phis = []
        for t, init in carried:
            phi = b.phi(t)
            phi.add_incoming(init, pre)
            phis.append(phi)
        new = body(b, i, *phis) if carried else (body(b, i), [])[1]
        nxt = b.add(i, ir.Constant(self.i64, 1))
        last = b.block
        i.add_incoming(nxt, last)
        for phi, value in zip(phis, new):
            phi.add_incoming(value, last)
        b.cbranch(b.icmp_signed("<", nxt, count), head, done)
        b.position_at_end(done)
        results = []
        for (t, init), value in zip(carried, new):
            merged = b.phi(t)
            merged.add_incoming(init, pre)
            merged.add_incoming(value, last)
            results.append(merged)
        return results

    def load(self, b: Any, base: Any, index: Any) -> Any:
        return b.load(b.gep(base, [index], source_etype=self.f32), typ=self.f32, align=4)

    def store(self, b: Any, value: Any, base: Any, index: Any) -> None:
        b.store(value, b.gep(base, [index], source_etype=self.f32), align=4)

    # ------------------------------------------------------------------ math
    def exp(self, b: Any, x: Any) -> Any:
        """``exp`` in float32; results below the smallest normal float (``x < -87.33``)
        are 0 and above 88.72 ``inf``; NaN stays NaN. Flushing instead of building
        subnormals keeps every lane off the CPU's slow subnormal path (masked attention
        scores sit at -1e4)."""
        ir, c = self.ir, self.c
        fma = lambda a, m, k: self.intr(b, "llvm.fma", a, m, k)  # noqa: E731
        shifter = 12582912.0  # 1.5 * 2^23: adding it rounds to an integer in the low mantissa bits
        low, high = -87.33654, 88.72283
        under = b.fcmp_ordered("<", x, c(low))
        over = b.fcmp_ordered(">", x, c(high))
        xc = b.select(under, c(low), b.select(over, c(high), x))
        t = fma(xc, c(1.4426950408889634), c(shifter))
        n = b.fsub(t, c(shifter))
        r = fma(n, c(-0.693359375), xc)
        r = fma(n, c(2.12194440e-4), r)
        p = c(1.0 / math.factorial(7))
        for k in range(6, -1, -1):
            p = fma(p, r, c(1.0 / math.factorial(k)))
        ni = b.sub(b.bitcast(t, self.i32), b.bitcast(c(shifter), self.i32))
        half = b.ashr(ni, ir.Constant(self.i32, 1))
        s1 = b.bitcast(b.shl(b.add(half, ir.Constant(self.i32, 127)), ir.Constant(self.i32, 23)), self.f32)
        s2 = b.bitcast(b.shl(b.add(b.sub(ni, half), ir.Constant(self.i32, 127)), ir.Constant(self.i32, 23)), self.f32)
        value = b.fmul(b.fmul(p, s1), s2)
        return b.select(under, c(0.0), b.select(over, c(math.inf), value))

    def normal_tail(self, b: Any, z: Any) -> tuple[Any, Any]:
        """``(Q(z), exp(-z^2 / 2))`` for ``z >= 0``."""
        c = self.c
        t = b.fdiv(c(1.0), b.fadd(b.fmul(z, c(_P_NORMAL)), c(1.0)))
        poly = c(_B[4])
        for coefficient in _B[3::-1]:
            poly = b.fadd(b.fmul(poly, t), c(coefficient))
        poly = b.fmul(poly, t)
        e = self.exp(b, b.fmul(b.fmul(z, z), c(-0.5)))
        return b.fmul(poly, e), e

    # ------------------------------------------------------------------ kernels
    def gelu(self) -> None:
        fn, b = self.function("ember_gelu", [self.ptr, self.ptr, self.i64])
        x, out, n = fn.args

        def body(b, i):
            v = self.load(b, x, i)
            z = self.intr(b, "llvm.fabs", v)
            q, _ = self.normal_tail(b, z)
            positive = b.select(b.fcmp_ordered(">", v, self.c(0.0)), v, self.c(0.0))
            self.store(b, b.fsub(positive, b.fmul(z, q)), out, i)

        self.loop(b, n, body)
        b.ret_void()

    def gelu_backward(self) -> None:
        fn, b = self.function("ember_gelu_backward", [self.ptr, self.ptr, self.ptr, self.i64])
        x, g, out, n = fn.args
        c = self.c

        def body(b, i):
            v = self.load(b, x, i)
            z = self.intr(b, "llvm.fabs", v)
            q, e = self.normal_tail(b, z)
            cdf = b.select(b.fcmp_unordered("<", v, c(0.0)), q, b.fsub(c(1.0), q))
            slope = b.fadd(cdf, b.fmul(b.fmul(v, e), c(_INV_SQRT_2PI)))
            self.store(b, b.fmul(slope, self.load(b, g, i)), out, i)

        self.loop(b, n, body)
        b.ret_void()

    def softmax_rows(self) -> None:
        """Rows ``[rows, cols]``: ``out = exp(x - max) / sum``; a row of only ``-inf``
        gives zeros when ``empty_zero`` (attention) and NaN otherwise (as numpy)."""
        fn, b = self.function("ember_softmax_rows", [self.ptr, self.ptr, self.i64, self.i64, self.i32])
        x, out, rows, cols, empty_zero = fn.args
        ir, c = self.ir, self.c

        def row(b, r):
            base = b.mul(r, cols)
            xr = b.gep(x, [base], source_etype=self.f32)
            orow = b.gep(out, [base], source_etype=self.f32)
            peak = self._row_max(b, xr, cols)
            empty = b.and_(
                b.fcmp_ordered("==", peak, c(-math.inf)), b.icmp_signed("!=", empty_zero, ir.Constant(self.i32, 0))
            )
            shift = b.select(b.fcmp_ordered("==", peak, c(-math.inf)), c(0.0), peak)

            def expo(b, j, s):
                e = self.exp(b, b.fsub(self.load(b, xr, j), shift))
                self.store(b, e, orow, j)
                return [b.fadd(s, e, flags=("reassoc",))]

            (total,) = self.loop(b, cols, expo, [(self.f32, c(0.0))])
            inv = b.select(empty, c(0.0), b.fdiv(c(1.0), total))
            self.loop(b, cols, lambda b, j: self.store(b, b.fmul(self.load(b, orow, j), inv), orow, j))

        self.loop(b, rows, row)
        b.ret_void()

    def _key(self, b: Any, v: Any) -> Any:
        """An int32 key ordered as the float32 ``v`` (``-inf`` < ... < ``inf`` < NaN for
        NaNs with the sign bit clear): integer maxima vectorise without fast-math flags,
        float ones do not."""
        bits = b.bitcast(v, self.i32)
        flip = b.and_(b.ashr(bits, self.ir.Constant(self.i32, 31)), self.ir.Constant(self.i32, 0x7FFFFFFF))
        return b.xor(bits, flip)

    def _from_key(self, b: Any, key: Any) -> Any:
        flip = b.and_(b.ashr(key, self.ir.Constant(self.i32, 31)), self.ir.Constant(self.i32, 0x7FFFFFFF))
        return b.bitcast(b.xor(key, flip), self.f32)

    def _row_max(self, b: Any, row: Any, cols: Any) -> Any:
        """The row's maximum, NaN when it holds a NaN (one with the sign bit clear ranks
        above everything; one with it set leaves NaN in the exponentials instead)."""
        lowest = self.ir.Constant(self.i32, -0x80000000)

        def step(b, j, m):
            key = self._key(b, self.load(b, row, j))
            return [b.select(b.icmp_signed(">", key, m), key, m)]

        (key,) = self.loop(b, cols, step, [(self.i32, lowest)])
        return self._from_key(b, key)

    def layer_norm(self) -> None:
        fn, b = self.function(
            "ember_layer_norm",
            [self.ptr, self.ptr, self.ptr, self.ptr, self.ptr, self.ptr, self.i64, self.i64, self.f32],
        )
        x, gamma, beta, out, mean_out, rstd_out, rows, cols, eps = fn.args
        c = self.c
        reassoc = ("reassoc",)

        def row(b, r):
            base = b.mul(r, cols)
            xr = b.gep(x, [base], source_etype=self.f32)
            orow = b.gep(out, [base], source_etype=self.f32)
            d = b.sitofp(cols, self.f32)
            (total,) = self.loop(
                b, cols, lambda b, j, s: [b.fadd(s, self.load(b, xr, j), flags=reassoc)], [(self.f32, c(0.0))]
            )
            mean = b.fdiv(total, d)

            def square(b, j, s):
                centered = b.fsub(self.load(b, xr, j), mean)
                return [b.fadd(s, b.fmul(centered, centered), flags=reassoc)]

            (sq,) = self.loop(b, cols, square, [(self.f32, c(0.0))])
            rstd = b.fdiv(c(1.0), self.intr(b, "llvm.sqrt", b.fadd(b.fdiv(sq, d), eps)))

            def norm(b, j):
                value = b.fmul(b.fsub(self.load(b, xr, j), mean), rstd)
                value = b.fadd(b.fmul(value, self.load(b, gamma, j)), self.load(b, beta, j))
                self.store(b, value, orow, j)

            self.loop(b, cols, norm)
            self.store(b, mean, mean_out, r)
            self.store(b, rstd, rstd_out, r)

        self.loop(b, rows, row)
        b.ret_void()

    def layer_norm_backward(self) -> None:
        """``dx = rstd (h - mean(h) - xhat mean(h xhat))`` with ``h = g gamma``, and the
        sums over rows ``dgamma += g xhat``, ``dbeta += g`` (zeroed by the caller);
        ``need`` bit 0: dx, bit 1: dgamma and dbeta."""
        fn, b = self.function(
            "ember_layer_norm_backward",
            [self.ptr] * 8 + [self.i64, self.i64, self.i32],
        )
        x, gamma, mean_in, rstd_in, g, dx, dgamma, dbeta, rows, cols, need = fn.args
        ir, c = self.ir, self.c
        reassoc = ("reassoc",)
        want_x = b.icmp_signed("!=", b.and_(need, ir.Constant(self.i32, 1)), ir.Constant(self.i32, 0))
        want_params = b.icmp_signed("!=", b.and_(need, ir.Constant(self.i32, 2)), ir.Constant(self.i32, 0))

        def row(b, r):
            base = b.mul(r, cols)
            xr = b.gep(x, [base], source_etype=self.f32)
            gr = b.gep(g, [base], source_etype=self.f32)
            dxr = b.gep(dx, [base], source_etype=self.f32)
            mean = self.load(b, mean_in, r)
            rstd = self.load(b, rstd_in, r)
            d = b.sitofp(cols, self.f32)

            def sums(b, j, sh, shx):
                xhat = b.fmul(b.fsub(self.load(b, xr, j), mean), rstd)
                h = b.fmul(self.load(b, gr, j), self.load(b, gamma, j))
                return [b.fadd(sh, h, flags=reassoc), b.fadd(shx, b.fmul(h, xhat), flags=reassoc)]

            sh, shx = self.loop(b, cols, sums, [(self.f32, c(0.0)), (self.f32, c(0.0))])
            a, bb = b.fdiv(sh, d), b.fdiv(shx, d)
            with b.if_then(want_x):

                def grad_x(b, j):
                    xhat = b.fmul(b.fsub(self.load(b, xr, j), mean), rstd)
                    h = b.fmul(self.load(b, gr, j), self.load(b, gamma, j))
                    value = b.fmul(b.fsub(b.fsub(h, a), b.fmul(xhat, bb)), rstd)
                    self.store(b, value, dxr, j)

                self.loop(b, cols, grad_x)
            with b.if_then(want_params):

                def grad_params(b, j):
                    xhat = b.fmul(b.fsub(self.load(b, xr, j), mean), rstd)
                    gv = self.load(b, gr, j)
                    self.store(b, b.fadd(self.load(b, dgamma, j), b.fmul(gv, xhat)), dgamma, j)
                    self.store(b, b.fadd(self.load(b, dbeta, j), gv), dbeta, j)

                self.loop(b, cols, grad_params)

        self.loop(b, rows, row)
        b.ret_void()


def _host_features() -> str:
    import llvmlite.binding as llvm

    return llvm.get_host_cpu_features().flatten()


def _module(ir: Any) -> str:
    emitter = _Emitter(ir)
    emitter.gelu()
    emitter.gelu_backward()
    emitter.softmax_rows()
    emitter.layer_norm()
    emitter.layer_norm_backward()
    return str(emitter.module)
