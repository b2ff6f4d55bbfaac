"""Elementwise math as LLVM IR: the semantics of flex's numpy ops, op by op.

Every function takes an ``llvmlite.ir.IRBuilder`` and scalar IR values and emits
branch-free IR, so the loop vectoriser can widen it. Semantics follow numpy (what
flex computes): NaN propagates through ``maximum``/``minimum``; integer
``floor_div``/``remainder`` follow Python's sign rule and give 0 for a zero divisor;
shifts past the width give 0 (or -1 for a negative value shifted right); float to
int casts out of range give the minimum integer, as numpy does on x86.

Transcendentals. float32 ``exp`` is computed here in float32 arithmetic and
``log`` and ``tanh`` in float64 arithmetic (range reduction plus a polynomial),
then rounded: within about one float32 ulp of the correctly rounded result, and
vectorisable. float32 ``erf`` is flex's own
formula (Abramowitz & Stegun 7.1.26 with a series near zero, absolute error below
1.5e-7); :meth:`MathLib.normal_tail_f32` is the same formula in the normal tail's
variable (exact GELU), and :meth:`MathLib.exp_f32_flushed` an ``exp`` that flushes
subnormal results to 0 (flex's native kernels). Everything else, and every float64
function, calls the C library (which is what numpy's float64 loops compute too, up
to its own SIMD variants). This is the one math library of ember's compiled CPU code:
fusion's plans and flex's native kernels both emit through it.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

F32 = ir.FloatType()
F64 = ir.DoubleType()
I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)

# Abramowitz & Stegun 7.1.26 in the normal tail's variable: erf(x) with x = z / sqrt 2,
# its coefficients halved (Q = (1 - erf) / 2).
_P_NORMAL = 0.3275911 * math.sqrt(0.5)
_B_NORMAL = tuple(a / 2 for a in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429))

#: Fast-math flags of reductions' accumulation (reassociation lets LLVM vectorise
#: them; results stay within float tolerance, and NaN/inf are untouched).
REDUCE_FLAGS = ("reassoc", "contract")


def reg_type(dtype: np.dtype) -> ir.Type:
    """The IR type of a value of ``dtype`` in registers (bool is ``i1``)."""
    kind = dtype.kind
    if kind == "b":
        return I1
    if kind == "f":
        return F32 if dtype.itemsize == 4 else F64
    return ir.IntType(dtype.itemsize * 8)


def mem_type(dtype: np.dtype) -> ir.Type:
    """The IR type of an element of ``dtype`` in memory (bool is one byte)."""
    return I8 if dtype.kind == "b" else reg_type(dtype)


def kernel_function(module: ir.Module, name: str, types: list[ir.Type], vector_width: int | None) -> ir.Function:
    """A new void function ``name`` of ``types`` in ``module``, as the kernel layer's
    functions are declared: pointer arguments ``noalias``, ``nounwind``, and the host's
    preferred vector width (a string attribute llvmlite does not list) where it has one."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), types), name=name)
    for arg, t in zip(fn.args, types):
        if isinstance(t, ir.PointerType):
            arg.add_attribute("noalias")
    fn.attributes.add("nounwind")
    if vector_width:
        set.add(fn.attributes, f'"prefer-vector-width"="{vector_width}"')
    return fn


def const(dtype: np.dtype, value) -> ir.Constant:
    t = reg_type(dtype)
    if dtype.kind == "b":
        return ir.Constant(I1, int(bool(value)))
    if dtype.kind == "f":
        return ir.Constant(t, float(value))
    bits = dtype.itemsize * 8
    return ir.Constant(t, int(value) & ((1 << bits) - 1))


class MathLib:
    """Emits math IR into one module (declaring intrinsics and libm functions once)."""

    def __init__(self, module: ir.Module):
        self.module = module
        self._decls: dict[str, ir.Function] = {}

    # ------------------------------------------------------------------ declarations
    def intrinsic(self, name: str, t: ir.Type, n_args: int = 1) -> ir.Function:
        key = f"{name}.{t}"
        fn = self._decls.get(key)
        if fn is None:
            fn = self.module.declare_intrinsic(name, [t], ir.FunctionType(t, [t] * n_args))
            self._decls[key] = fn
        return fn

    def libm(self, name: str, t: ir.Type, n_args: int = 1) -> ir.Function:
        cname = name + ("f" if t == F32 else "")
        fn = self._decls.get(cname)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(t, [t] * n_args), name=cname)
            fn.attributes.add("nounwind")
            self._decls[cname] = fn
        return fn

    def call(self, b: ir.IRBuilder, name: str, *args: ir.Value) -> ir.Value:
        return b.call(self.libm(name, args[0].type, len(args)), list(args))

    def intr(self, b: ir.IRBuilder, name: str, *args: ir.Value) -> ir.Value:
        return b.call(self.intrinsic(name, args[0].type, len(args)), list(args))

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def fconst(t: ir.Type, value: float) -> ir.Constant:
        return ir.Constant(t, value)

    def is_nan(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return b.fcmp_unordered("uno", x, x)

    def nonzero(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """numpy truthiness as ``i1`` (NaN is true)."""
        if x.type == I1:
            return x
        if x.type in (F32, F64):
            return b.fcmp_unordered("une", x, ir.Constant(x.type, 0.0))
        return b.icmp_unsigned("!=", x, ir.Constant(x.type, 0))

    def fmax(self, b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
        """numpy ``maximum``: NaN if either is NaN; ``y`` on ties (x86 ``maxps``)."""
        pick = b.or_(b.fcmp_ordered(">", x, y), self.is_nan(b, x))
        return b.select(pick, x, y)

    def fmin(self, b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
        pick = b.or_(b.fcmp_ordered("<", x, y), self.is_nan(b, x))
        return b.select(pick, x, y)

    # ------------------------------------------------------------------ float32 kernels
    def exp_f64_core(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """``exp(x)`` for a float64 ``x`` already clamped to [-200, 100], to about 2e-10
        relative: ``2^n * P(r)`` with ``r = x - n ln 2``, ``|r| <= ln(2)/2``."""
        shifter = 6755399441055744.0  # 1.5 * 2^52: adding it rounds to an integer in the low bits
        t = b.fadd(b.fmul(x, ir.Constant(F64, 1.0 / math.log(2.0))), ir.Constant(F64, shifter))
        n = b.fsub(t, ir.Constant(F64, shifter))
        r = b.fsub(
            b.fsub(x, b.fmul(n, ir.Constant(F64, 0.6931471803691238))),
            b.fmul(n, ir.Constant(F64, 1.9082149292705877e-10)),
        )
        p = ir.Constant(F64, 1.0 / math.factorial(9))
        for k in range(8, -1, -1):
            p = b.fadd(b.fmul(p, r), ir.Constant(F64, 1.0 / math.factorial(k)))
        bits = b.sub(b.bitcast(t, I64), b.bitcast(ir.Constant(F64, shifter), I64))
        scale = b.bitcast(b.shl(b.add(bits, ir.Constant(I64, 1023)), ir.Constant(I64, 52)), F64)
        return b.fmul(p, scale)

    def clamp_f64(self, b: ir.IRBuilder, x: ir.Value, low: float, high: float) -> ir.Value:
        """``x`` limited to [low, high]; NaN stays NaN."""
        x = b.select(b.fcmp_ordered("<", x, ir.Constant(F64, low)), ir.Constant(F64, low), x)
        return b.select(b.fcmp_ordered(">", x, ir.Constant(F64, high)), ir.Constant(F64, high), x)

    def exp_f32(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """``exp`` in float32 arithmetic (within one ulp): ``x = n ln 2 + r`` with a
        two-part ``ln 2``, a degree-7 Taylor polynomial in ``r`` with fused multiply-adds,
        and ``2^n`` as two exponent-built halves, so results that are subnormal or
        overflow round once, correctly."""
        f = lambda v: ir.Constant(F32, v)  # noqa: E731
        x = b.select(b.fcmp_ordered("<", x, f(-104.0)), f(-104.0), x)
        x = b.select(b.fcmp_ordered(">", x, f(89.0)), f(89.0), x)
        return self._exp_f32_core(b, x)

    def exp_f32_flushed(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """:meth:`exp_f32` with results below the smallest normal float32 (``x <
        -87.33``) flushed to 0, and ``inf`` above 88.72; NaN stays NaN. Keeping every
        lane off the CPU's slow subnormal path matters where many inputs are very
        negative (masked attention scores sit at -1e4): flex's native kernels use it."""
        f = lambda v: ir.Constant(F32, v)  # noqa: E731
        low, high = -87.33654, 88.72283
        under = b.fcmp_ordered("<", x, f(low))
        over = b.fcmp_ordered(">", x, f(high))
        value = self._exp_f32_core(b, b.select(under, f(low), b.select(over, f(high), x)))
        return b.select(under, f(0.0), b.select(over, f(math.inf), value))

    def _exp_f32_core(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """``exp`` of a clamped float32 ``x`` (see :meth:`exp_f32`)."""
        fma = lambda a, m, c: self.intr(b, "llvm.fma", a, m, c)  # noqa: E731
        f = lambda v: ir.Constant(F32, v)  # noqa: E731
        shifter = 12582912.0  # 1.5 * 2^23: adding it rounds to an integer in the low mantissa bits
        t = fma(x, f(1.4426950408889634), f(shifter))
        n = b.fsub(t, f(shifter))
        r = fma(n, f(-0.693359375), x)
        r = fma(n, f(2.12194440e-4), r)
        p = f(1.0 / math.factorial(7))
        for k in range(6, -1, -1):
            p = fma(p, r, f(1.0 / math.factorial(k)))
        ni = b.sub(b.bitcast(t, I32), b.bitcast(f(shifter), I32))  # n, without an fptosi (NaN-safe)
        half = b.ashr(ni, ir.Constant(I32, 1))
        s1 = b.bitcast(b.shl(b.add(half, ir.Constant(I32, 127)), ir.Constant(I32, 23)), F32)
        s2 = b.bitcast(b.shl(b.add(b.sub(ni, half), ir.Constant(I32, 127)), ir.Constant(I32, 23)), F32)
        return b.fmul(b.fmul(p, s1), s2)

    def log_f32(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """``log`` through float64: ``x = m 2^e`` with ``m`` in [sqrt(1/2), sqrt(2)),
        ``log m = 2 atanh(s)``, ``s = (m - 1) / (m + 1)``."""
        xd = b.fpext(x, F64)
        bits = b.bitcast(xd, I64)
        mant = b.or_(b.and_(bits, ir.Constant(I64, 0x000FFFFFFFFFFFFF)), ir.Constant(I64, 0x3FF0000000000000))
        m = b.bitcast(mant, F64)
        # The exponent as a double without an int->float conversion: 2^52 + e_bits, minus 2^52.
        e_bits = b.lshr(bits, ir.Constant(I64, 52))
        e = b.fsub(
            b.bitcast(b.or_(e_bits, ir.Constant(I64, 0x4330000000000000)), F64),
            ir.Constant(F64, 4503599627370496.0 + 1023.0),
        )
        big = b.fcmp_ordered(">", m, ir.Constant(F64, math.sqrt(2.0)))
        m = b.select(big, b.fmul(m, ir.Constant(F64, 0.5)), m)
        e = b.select(big, b.fadd(e, ir.Constant(F64, 1.0)), e)
        s = b.fdiv(b.fsub(m, ir.Constant(F64, 1.0)), b.fadd(m, ir.Constant(F64, 1.0)))
        s2 = b.fmul(s, s)
        p = ir.Constant(F64, 1.0 / 13.0)
        for k in (11, 9, 7, 5, 3, 1):
            p = b.fadd(b.fmul(p, s2), ir.Constant(F64, 1.0 / k))
        result = b.fadd(b.fmul(e, ir.Constant(F64, math.log(2.0))), b.fmul(b.fmul(s, ir.Constant(F64, 2.0)), p))
        result = b.fptrunc(result, F32)
        zero = ir.Constant(F32, 0.0)
        result = b.select(b.fcmp_ordered("==", x, zero), ir.Constant(F32, -math.inf), result)
        result = b.select(b.fcmp_ordered("<", x, zero), ir.Constant(F32, math.nan), result)
        result = b.select(b.fcmp_ordered("==", x, ir.Constant(F32, math.inf)), x, result)
        return b.select(self.is_nan(b, x), x, result)

    def tanh_f32(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """``tanh(|x|) = e / (e + 2)`` with ``e = expm1(2|x|)`` (a series below 0.5, so
        small arguments keep their relative accuracy), then the sign of ``x``."""
        xd = b.fpext(x, F64)
        a = self.clamp_f64(b, self.intr(b, "llvm.fabs", xd), 0.0, 20.0)
        u = b.fmul(a, ir.Constant(F64, 2.0))
        series = ir.Constant(F64, 1.0 / math.factorial(12))
        for k in range(11, 0, -1):
            series = b.fadd(b.fmul(series, u), ir.Constant(F64, 1.0 / math.factorial(k)))
        series = b.fmul(series, u)
        big = b.fsub(self.exp_f64_core(b, u), ir.Constant(F64, 1.0))
        e = b.select(b.fcmp_ordered("<", u, ir.Constant(F64, 0.5)), series, big)
        t = b.fdiv(e, b.fadd(e, ir.Constant(F64, 2.0)))
        t = self.intr(b, "llvm.copysign", t, xd)
        return b.select(self.is_nan(b, x), x, b.fptrunc(t, F32))

    def erf_f32(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """flex's float32 ``erf`` (``ember.backend.flex.special.erf``: Abramowitz & Stegun
        7.1.26, a series below 0.5), with its polynomials evaluated by fused multiply-adds
        and ``x2 / 216`` as a product: within a float32 ulp or two of flex's values, well
        inside the formula's own error (1.5e-7), and about 1.5x faster."""
        c = lambda v: ir.Constant(F32, float(np.float32(v)))  # noqa: E731 - numpy rounds Python floats to float32
        fma = lambda a, m, k: self.intr(b, "llvm.fma", a, m, k)  # noqa: E731
        a = self.intr(b, "llvm.fabs", x)
        t = b.fdiv(c(1.0), fma(c(0.3275911), a, c(1.0)))
        p = fma(t, c(1.061405429), c(-1.453152027))
        p = fma(t, p, c(1.421413741))
        p = fma(t, p, c(-0.284496736))
        p = fma(t, p, c(0.254829592))
        poly = b.fmul(t, p)
        e = self.exp_f32(b, b.fmul(b.fneg(a), a))
        far = self.intr(b, "llvm.copysign", fma(b.fneg(poly), e, c(1.0)), x)
        x2 = b.fmul(x, x)
        q = fma(x2, c(1.0 / 216), c(-1.0 / 42))
        q = fma(x2, q, c(1.0 / 10))
        q = fma(x2, q, c(-1.0 / 3))
        q = fma(x2, q, c(1.0))
        near = b.fmul(b.fmul(c(2.0 / math.sqrt(math.pi)), x), q)
        return b.select(b.fcmp_ordered("<", a, c(0.5)), near, far)

    def normal_tail_f32(self, b: ir.IRBuilder, z: ir.Value) -> tuple[ir.Value, ir.Value]:
        """``(Q(z), exp(-z^2 / 2))`` in float32 for ``z >= 0``, where ``Q(z) =
        erfc(z / sqrt 2) / 2`` is the normal tail: the :meth:`erf_f32` formula (Abramowitz
        & Stegun 7.1.26) in ``z``, as flex's exact GELU computes it
        (``ember.backend.flex.special``), with :meth:`exp_f32_flushed`."""
        c = lambda v: ir.Constant(F32, v)  # noqa: E731
        t = b.fdiv(c(1.0), b.fadd(b.fmul(z, c(_P_NORMAL)), c(1.0)))
        poly = c(_B_NORMAL[4])
        for coefficient in _B_NORMAL[3::-1]:
            poly = b.fadd(b.fmul(poly, t), c(coefficient))
        poly = b.fmul(poly, t)
        e = self.exp_f32_flushed(b, b.fmul(b.fmul(z, z), c(-0.5)))
        return b.fmul(poly, e), e

    def normal_tail_q_f32(self, b: ir.IRBuilder, z: ir.Value) -> ir.Value:
        """``Q(z)`` of :meth:`normal_tail_f32` (the op table's ``NORMAL_TAIL``); a kernel
        that also needs the density spells it ``exp_flushed(z * z * -0.5)``, the same
        instructions, which LLVM computes once."""
        return self.normal_tail_f32(b, z)[0]
