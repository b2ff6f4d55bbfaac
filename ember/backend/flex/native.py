"""flex's native kernels: the few float32 loops whose numpy form costs many passes
over memory (exact GELU and its gradient, row softmax, layer norm and its gradient, the LSTM
cell and its gradient),
compiled once per process for the host CPU by the kernel layer's LLVM JIT
(:mod:`ember.backend.kernel.llvm`; llvmlite is a runtime dependency), so that the loop
vectoriser widens them to its SIMD width.

Each kernel takes contiguous float32 arrays. :func:`kernels` returns ``None`` when
llvmlite cannot compile for this machine (or ``EMBER_FLEX_NATIVE=0``), and for arrays
too small to repay the compilation (:data:`MIN_ELEMENTS`); flex then runs its numpy
versions of the same formulas. The math is the kernel layer's
(:class:`~ember.backend.kernel.llvm.mathlib.MathLib`) and matches those versions:
GELU through the normal tail of Abramowitz & Stegun 7.1.26
(:meth:`~ember.backend.kernel.llvm.mathlib.MathLib.normal_tail_f32`) and ``exp`` with
results below the smallest normal float flushed to 0
(:meth:`~ember.backend.kernel.llvm.mathlib.MathLib.exp_f32_flushed`), within about one
float32 ulp.
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Environment variable: ``0`` turns the native kernels off (numpy only).
NATIVE_ENV = "EMBER_FLEX_NATIVE"

_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}
_F32 = np.dtype(np.float32)
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
    lstm_cell: Any
    lstm_cell_backward: Any


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
        from ember.backend.kernel.llvm import jit
    except ImportError:  # pragma: no cover - llvmlite is a runtime dependency
        return None
    names = [
        "ember_gelu",
        "ember_gelu_backward",
        "ember_softmax_rows",
        "ember_layer_norm",
        "ember_layer_norm_backward",
        "ember_lstm_cell",
        "ember_lstm_cell_backward",
    ]
    try:
        compiled = jit.compile_module(_module(), names, unroll=True, codegen_opt=3, cache=True)
    except Exception:  # an unsupported host or llvmlite version: numpy instead
        return None
    p, i64, f32, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int32

    def fn(name: str, *args: Any) -> Any:
        return ctypes.CFUNCTYPE(None, *args)(compiled.addresses[name])

    return Kernels(
        engine=compiled.engine,
        gelu=fn("ember_gelu", p, p, i64),
        gelu_backward=fn("ember_gelu_backward", p, p, p, i64),
        softmax_rows=fn("ember_softmax_rows", p, p, i64, i64, i32),
        layer_norm=fn("ember_layer_norm", p, p, p, p, p, p, i64, i64, f32),
        layer_norm_backward=fn("ember_layer_norm_backward", p, p, p, p, p, p, p, p, i64, i64, i32),
        lstm_cell=fn("ember_lstm_cell", p, p, p, p, i64, i64),
        lstm_cell_backward=fn("ember_lstm_cell_backward", p, p, p, p, p, p, p, i64, i64),
    )


class _Emitter:
    """Emits the kernels into one module, over the kernel layer's math library and loops."""

    def __init__(self) -> None:
        from llvmlite import ir

        from ember.backend.kernel.llvm import jit
        from ember.backend.kernel.llvm.mathlib import MathLib

        self.ir = ir
        self.module = ir.Module(name="ember_flex_native")
        self.math = MathLib(self.module)
        self.f32 = ir.FloatType()
        self.i32 = ir.IntType(32)
        self.i64 = ir.IntType(64)
        self.ptr = ir.PointerType()
        self.void = ir.VoidType()
        self.width = jit.vector_width()
        self.b: Any = None

    def c(self, value: float) -> Any:
        return self.ir.Constant(self.f32, value)

    def intr(self, name: str, *args: Any) -> Any:
        return self.math.intr(self.b, name, *args)

    def function(self, name: str, args: list[Any]) -> Any:
        """A new function ``name``; :attr:`b` builds its body. Returns its arguments."""
        fn = self.ir.Function(self.module, self.ir.FunctionType(self.void, args), name=name)
        for i, arg in enumerate(fn.args):
            if args[i] is self.ptr:
                arg.add_attribute("noalias")
        fn.attributes.add("nounwind")
        if self.width:
            set.add(fn.attributes, f'"prefer-vector-width"="{self.width}"')  # a string attribute llvmlite does not list
        self.b = self.ir.IRBuilder(fn.append_basic_block("entry"))
        return fn.args

    def loop(self, count: Any, body: Callable[..., Any], carried: list[Any] | None = None) -> list[Any]:
        """``for i in range(count): carried = body(i, *carried)`` (a run-time count);
        returns the final carried values (reductions)."""
        from ember.backend.kernel.llvm.loops import Loops

        return Loops(self.b).count(count, lambda i, phis: body(i, *phis) or [], carried)

    def load(self, base: Any, index: Any) -> Any:
        b = self.b
        return b.load(b.gep(base, [index], source_etype=self.f32), typ=self.f32, align=4)

    def store(self, value: Any, base: Any, index: Any) -> None:
        b = self.b
        b.store(value, b.gep(base, [index], source_etype=self.f32), align=4)

    def row(self, base: Any, r: Any, cols: Any) -> Any:
        return self.b.gep(base, [self.b.mul(r, cols)], source_etype=self.f32)

    # ------------------------------------------------------------------ kernels
    def gelu(self) -> None:
        x, out, n = self.function("ember_gelu", [self.ptr, self.ptr, self.i64])
        b = self.b

        def body(i):
            v = self.load(x, i)
            z = self.intr("llvm.fabs", v)
            q, _ = self.math.normal_tail_f32(b, z)
            positive = b.select(b.fcmp_ordered(">", v, self.c(0.0)), v, self.c(0.0))
            self.store(b.fsub(positive, b.fmul(z, q)), out, i)

        self.loop(n, body)
        b.ret_void()

    def gelu_backward(self) -> None:
        x, g, out, n = self.function("ember_gelu_backward", [self.ptr, self.ptr, self.ptr, self.i64])
        b, c = self.b, self.c

        def body(i):
            v = self.load(x, i)
            z = self.intr("llvm.fabs", v)
            q, e = self.math.normal_tail_f32(b, z)
            cdf = b.select(b.fcmp_unordered("<", v, c(0.0)), q, b.fsub(c(1.0), q))
            slope = b.fadd(cdf, b.fmul(b.fmul(v, e), c(_INV_SQRT_2PI)))
            self.store(b.fmul(slope, self.load(g, i)), out, i)

        self.loop(n, body)
        b.ret_void()

    def softmax_rows(self) -> None:
        """Rows ``[rows, cols]``: ``out = exp(x - max) / sum``; a row of only ``-inf``
        gives zeros when ``empty_zero`` (attention) and NaN otherwise (as numpy)."""
        x, out, rows, cols, empty_zero = self.function(
            "ember_softmax_rows", [self.ptr, self.ptr, self.i64, self.i64, self.i32]
        )
        ir, b, c = self.ir, self.b, self.c

        def row(r):
            xr, orow = self.row(x, r, cols), self.row(out, r, cols)
            peak = self._row_max(xr, cols)
            empty = b.and_(
                b.fcmp_ordered("==", peak, c(-math.inf)), b.icmp_signed("!=", empty_zero, ir.Constant(self.i32, 0))
            )
            shift = b.select(b.fcmp_ordered("==", peak, c(-math.inf)), c(0.0), peak)

            def expo(j, s):
                e = self.math.exp_f32_flushed(b, b.fsub(self.load(xr, j), shift))
                self.store(e, orow, j)
                return [b.fadd(s, e, flags=("reassoc",))]

            (total,) = self.loop(cols, expo, [c(0.0)])
            inv = b.select(empty, c(0.0), b.fdiv(c(1.0), total))
            self.loop(cols, lambda j: self.store(b.fmul(self.load(orow, j), inv), orow, j))

        self.loop(rows, row)
        b.ret_void()

    def _key(self, v: Any) -> Any:
        """An int32 key ordered as the float32 ``v`` (``-inf`` < ... < ``inf`` < NaN for
        NaNs with the sign bit clear): integer maxima vectorise without fast-math flags,
        float ones do not."""
        b = self.b
        bits = b.bitcast(v, self.i32)
        flip = b.and_(b.ashr(bits, self.ir.Constant(self.i32, 31)), self.ir.Constant(self.i32, 0x7FFFFFFF))
        return b.xor(bits, flip)

    def _from_key(self, key: Any) -> Any:
        b = self.b
        flip = b.and_(b.ashr(key, self.ir.Constant(self.i32, 31)), self.ir.Constant(self.i32, 0x7FFFFFFF))
        return b.bitcast(b.xor(key, flip), self.f32)

    def _row_max(self, row: Any, cols: Any) -> Any:
        """The row's maximum, NaN when it holds a NaN (one with the sign bit clear ranks
        above everything; one with it set leaves NaN in the exponentials instead)."""
        b = self.b

        def step(j, m):
            key = self._key(self.load(row, j))
            return [b.select(b.icmp_signed(">", key, m), key, m)]

        (key,) = self.loop(cols, step, [self.ir.Constant(self.i32, -0x80000000)])
        return self._from_key(key)

    def layer_norm(self) -> None:
        x, gamma, beta, out, mean_out, rstd_out, rows, cols, eps = self.function(
            "ember_layer_norm",
            [self.ptr, self.ptr, self.ptr, self.ptr, self.ptr, self.ptr, self.i64, self.i64, self.f32],
        )
        b, c = self.b, self.c
        reassoc = ("reassoc",)

        def row(r):
            xr, orow = self.row(x, r, cols), self.row(out, r, cols)
            d = b.sitofp(cols, self.f32)
            (total,) = self.loop(cols, lambda j, s: [b.fadd(s, self.load(xr, j), flags=reassoc)], [c(0.0)])
            mean = b.fdiv(total, d)

            def square(j, s):
                centered = b.fsub(self.load(xr, j), mean)
                return [b.fadd(s, b.fmul(centered, centered), flags=reassoc)]

            (sq,) = self.loop(cols, square, [c(0.0)])
            rstd = b.fdiv(c(1.0), self.intr("llvm.sqrt", b.fadd(b.fdiv(sq, d), eps)))

            def norm(j):
                value = b.fmul(b.fsub(self.load(xr, j), mean), rstd)
                value = b.fadd(b.fmul(value, self.load(gamma, j)), self.load(beta, j))
                self.store(value, orow, j)

            self.loop(cols, norm)
            self.store(mean, mean_out, r)
            self.store(rstd, rstd_out, r)

        self.loop(rows, row)
        b.ret_void()

    def layer_norm_backward(self) -> None:
        """``dx = rstd (h - mean(h) - xhat mean(h xhat))`` with ``h = g gamma``, and the
        sums over rows ``dgamma += g xhat``, ``dbeta += g`` (zeroed by the caller);
        ``need`` bit 0: dx, bit 1: dgamma and dbeta."""
        x, gamma, mean_in, rstd_in, g, dx, dgamma, dbeta, rows, cols, need = self.function(
            "ember_layer_norm_backward", [self.ptr] * 8 + [self.i64, self.i64, self.i32]
        )
        ir, b, c = self.ir, self.b, self.c
        reassoc = ("reassoc",)
        want_x = b.icmp_signed("!=", b.and_(need, ir.Constant(self.i32, 1)), ir.Constant(self.i32, 0))
        want_params = b.icmp_signed("!=", b.and_(need, ir.Constant(self.i32, 2)), ir.Constant(self.i32, 0))

        def row(r):
            xr, gr, dxr = self.row(x, r, cols), self.row(g, r, cols), self.row(dx, r, cols)
            mean = self.load(mean_in, r)
            rstd = self.load(rstd_in, r)
            d = b.sitofp(cols, self.f32)

            def sums(j, sh, shx):
                xhat = b.fmul(b.fsub(self.load(xr, j), mean), rstd)
                h = b.fmul(self.load(gr, j), self.load(gamma, j))
                return [b.fadd(sh, h, flags=reassoc), b.fadd(shx, b.fmul(h, xhat), flags=reassoc)]

            sh, shx = self.loop(cols, sums, [c(0.0), c(0.0)])
            a, bb = b.fdiv(sh, d), b.fdiv(shx, d)
            with b.if_then(want_x):

                def grad_x(j):
                    xhat = b.fmul(b.fsub(self.load(xr, j), mean), rstd)
                    h = b.fmul(self.load(gr, j), self.load(gamma, j))
                    value = b.fmul(b.fsub(b.fsub(h, a), b.fmul(xhat, bb)), rstd)
                    self.store(value, dxr, j)

                self.loop(cols, grad_x)
            with b.if_then(want_params):

                def grad_params(j):
                    xhat = b.fmul(b.fsub(self.load(xr, j), mean), rstd)
                    gv = self.load(gr, j)
                    self.store(b.fadd(self.load(dgamma, j), b.fmul(gv, xhat)), dgamma, j)
                    self.store(b.fadd(self.load(dbeta, j), gv), dbeta, j)

                self.loop(cols, grad_params)

        self.loop(rows, row)
        b.ret_void()


def _module() -> str:
    from ember.backend.flex.native_rnn import RecurrentEmitter  # a subclass of _Emitter

    emitter = RecurrentEmitter()
    emitter.gelu()
    emitter.gelu_backward()
    emitter.softmax_rows()
    emitter.layer_norm()
    emitter.layer_norm_backward()
    emitter.lstm_cell()
    emitter.lstm_cell_backward()
    return str(emitter.module)
