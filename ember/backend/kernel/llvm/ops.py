"""The elementwise ops of the protocol as LLVM IR, with flex's (numpy's) semantics.

:class:`OpEmitter` turns one :class:`~ember.backend.fusion.scheduler.Expr` node into
IR given its operands' IR values: unary and binary ops per dtype family, ``where``,
``clamp`` and casts. :data:`LOWERED_UNARY` and :data:`LOWERED_BINARY` list what is
lowered per dtype kind (``"f"`` float32/float64, ``"i"`` int32/int64, ``"u"``
uint8, ``"b"`` bool); anything else runs eagerly on flex.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from ember.backend.kernel.llvm.mathlib import F32, F64, I1, MathLib, reg_type
from ember.backend.ops import BinaryOp, UnaryOp

_FLOAT_UNARY = frozenset(UnaryOp) - {UnaryOp.BITWISE_NOT}
_INT_UNARY = frozenset(
    {
        UnaryOp.NEG,
        UnaryOp.ABS,
        UnaryOp.SIGN,
        UnaryOp.SQUARE,
        UnaryOp.IS_NAN,
        UnaryOp.IS_INF,
        UnaryOp.IS_FINITE,
        UnaryOp.LOGICAL_NOT,
        UnaryOp.BITWISE_NOT,
    }
)
_BOOL_UNARY = frozenset({UnaryOp.IS_NAN, UnaryOp.IS_INF, UnaryOp.IS_FINITE, UnaryOp.LOGICAL_NOT, UnaryOp.BITWISE_NOT})
LOWERED_UNARY = {"f": _FLOAT_UNARY, "i": _INT_UNARY, "u": _INT_UNARY, "b": _BOOL_UNARY}

_COMPARE = {
    BinaryOp.EQ: "==",
    BinaryOp.NE: "!=",
    BinaryOp.GT: ">",
    BinaryOp.GE: ">=",
    BinaryOp.LT: "<",
    BinaryOp.LE: "<=",
}
_LOGICAL = frozenset({BinaryOp.LOGICAL_AND, BinaryOp.LOGICAL_OR, BinaryOp.LOGICAL_XOR})
_BITWISE = frozenset({BinaryOp.BITWISE_AND, BinaryOp.BITWISE_OR, BinaryOp.BITWISE_XOR})
_FLOAT_BINARY = (
    frozenset(
        {
            BinaryOp.ADD,
            BinaryOp.SUB,
            BinaryOp.MUL,
            BinaryOp.DIV,
            BinaryOp.REMAINDER,
            BinaryOp.FLOOR_DIV,
            BinaryOp.POW,
            BinaryOp.ATAN2,
            BinaryOp.COPYSIGN,
            BinaryOp.MAXIMUM,
            BinaryOp.MINIMUM,
        }
    )
    | set(_COMPARE)
    | _LOGICAL
)
_INT_BINARY = (
    frozenset(
        {
            BinaryOp.ADD,
            BinaryOp.SUB,
            BinaryOp.MUL,
            BinaryOp.REMAINDER,
            BinaryOp.FLOOR_DIV,
            BinaryOp.MAXIMUM,
            BinaryOp.MINIMUM,
            BinaryOp.LEFT_SHIFT,
            BinaryOp.RIGHT_SHIFT,
        }
    )
    | set(_COMPARE)
    | _LOGICAL
    | _BITWISE
)
_BOOL_BINARY = frozenset({BinaryOp.MAXIMUM, BinaryOp.MINIMUM}) | set(_COMPARE) | _LOGICAL | _BITWISE
LOWERED_BINARY = {"f": _FLOAT_BINARY, "i": _INT_BINARY, "u": _INT_BINARY, "b": _BOOL_BINARY}

_LIBM_UNARY = {
    UnaryOp.LOG1P: "log1p",
    UnaryOp.EXPM1: "expm1",
    UnaryOp.SIN: "sin",
    UnaryOp.COS: "cos",
    UnaryOp.TAN: "tan",
    UnaryOp.SINH: "sinh",
    UnaryOp.COSH: "cosh",
    UnaryOp.ASIN: "asin",
    UnaryOp.ACOS: "acos",
    UnaryOp.ATAN: "atan",
    UnaryOp.LOG2: "log2",
    UnaryOp.EXP2: "exp2",
    UnaryOp.ASINH: "asinh",
    UnaryOp.ACOSH: "acosh",
    UnaryOp.ATANH: "atanh",
}


def lowers_cast(src: np.dtype, dst: np.dtype) -> bool:
    """Casts compiled code performs exactly as numpy does (float to uint8 is not one:
    numpy wraps through a wider integer)."""
    return not (src.kind == "f" and dst.kind == "u")


class OpEmitter:
    """Emits the IR of elementwise ops (see the module docstring)."""

    def __init__(self, math_lib: MathLib):
        self.m = math_lib

    # ------------------------------------------------------------------ casts
    def cast(self, b: ir.IRBuilder, x: ir.Value, src: np.dtype, dst: np.dtype) -> ir.Value:
        if src == dst:
            return x
        sk, dk = src.kind, dst.kind
        t = reg_type(dst)
        if dk == "b":
            return self.m.nonzero(b, x)
        if sk == "b":
            return b.uitofp(x, t) if dk == "f" else b.zext(x, t)
        if sk == "f" and dk == "f":
            return b.fpext(x, t) if dst.itemsize > src.itemsize else b.fptrunc(x, t)
        if dk == "f":
            return b.uitofp(x, t) if sk == "u" else b.sitofp(x, t)
        if sk == "f":
            # numpy on x86: out of range or NaN gives the minimum integer.
            bits = dst.itemsize * 8
            low, high = ir.Constant(x.type, -(2.0 ** (bits - 1))), ir.Constant(x.type, 2.0 ** (bits - 1))
            ok = b.and_(b.fcmp_ordered(">=", x, low), b.fcmp_ordered("<", x, high))
            return b.select(ok, b.fptosi(x, t), ir.Constant(t, 1 << (bits - 1)))
        if dst.itemsize == src.itemsize:
            return x
        if dst.itemsize < src.itemsize:
            return b.trunc(x, t)
        return b.zext(x, t) if sk == "u" else b.sext(x, t)

    def from_double(self, b: ir.IRBuilder, x: ir.Value, dst: np.dtype) -> ir.Value:
        """A run-time scalar (float64) as ``dst``, as numpy converts a Python float."""
        if dst.kind == "f":
            return x if dst.itemsize == 8 else b.fptrunc(x, F32)
        return self.cast(b, x, np.dtype(np.float64), dst)

    # ------------------------------------------------------------------ unary
    def unary(self, b: ir.IRBuilder, op: UnaryOp, x: ir.Value, dtype: np.dtype) -> ir.Value:
        kind = dtype.kind
        if op in (UnaryOp.IS_NAN, UnaryOp.IS_INF, UnaryOp.IS_FINITE) and kind != "f":
            return ir.Constant(I1, int(op == UnaryOp.IS_FINITE))
        if op == UnaryOp.LOGICAL_NOT:
            return b.not_(self.m.nonzero(b, x))
        if kind == "b":  # bitwise_not
            return b.not_(x)
        if kind == "f":
            return self._float_unary(b, op, x, dtype)
        zero = ir.Constant(x.type, 0)
        if op == UnaryOp.NEG:
            return b.sub(zero, x)
        if op == UnaryOp.ABS:
            return x if kind == "u" else b.select(b.icmp_signed("<", x, zero), b.sub(zero, x), x)
        if op == UnaryOp.SIGN:
            pos = b.zext(b.icmp_unsigned("!=", x, zero) if kind == "u" else b.icmp_signed(">", x, zero), x.type)
            if kind == "u":
                return pos
            return b.sub(pos, b.zext(b.icmp_signed("<", x, zero), x.type))
        if op == UnaryOp.SQUARE:
            return b.mul(x, x)
        if op == UnaryOp.BITWISE_NOT:
            return b.not_(x)
        raise NotImplementedError(op)

    def _float_unary(self, b: ir.IRBuilder, op: UnaryOp, x: ir.Value, dtype: np.dtype) -> ir.Value:
        m = self.m
        t = x.type
        one = ir.Constant(t, 1.0)
        f32 = t == F32
        if op == UnaryOp.NEG:
            return b.fneg(x)
        if op == UnaryOp.ABS:
            return m.intr(b, "llvm.fabs", x)
        if op == UnaryOp.EXP:
            return m.exp_f32(b, x) if f32 else m.call(b, "exp", x)
        if op == UnaryOp.LOG:
            return m.log_f32(b, x) if f32 else m.call(b, "log", x)
        if op == UnaryOp.TANH:
            return m.tanh_f32(b, x) if f32 else m.call(b, "tanh", x)
        if op == UnaryOp.ERF:
            return m.erf_f32(b, x) if f32 else m.call(b, "erf", x)
        if op in _LIBM_UNARY:
            return m.call(b, _LIBM_UNARY[op], x)
        if op == UnaryOp.LOG10:  # in float64 for float32, as flex (exact at powers of ten)
            return b.fptrunc(m.call(b, "log10", b.fpext(x, F64)), F32) if f32 else m.call(b, "log10", x)
        if op == UnaryOp.SQRT:
            return m.intr(b, "llvm.sqrt", x)
        if op == UnaryOp.RSQRT:
            return b.fdiv(one, m.intr(b, "llvm.sqrt", x))
        if op == UnaryOp.RECIP:
            return b.fdiv(one, x)
        if op == UnaryOp.SIGN:  # +-0 and NaN give +0 (Burn's and PyTorch's rule)
            zero = ir.Constant(t, 0.0)
            out = b.select(b.fcmp_ordered("<", x, zero), ir.Constant(t, -1.0), zero)
            return b.select(b.fcmp_ordered(">", x, zero), one, out)
        if op == UnaryOp.ROUND:
            return m.intr(b, "llvm.roundeven", x)
        if op == UnaryOp.FLOOR:
            return m.intr(b, "llvm.floor", x)
        if op == UnaryOp.CEIL:
            return m.intr(b, "llvm.ceil", x)
        if op == UnaryOp.TRUNC:
            return m.intr(b, "llvm.trunc", x)
        if op == UnaryOp.SQUARE:
            return b.fmul(x, x)
        if op == UnaryOp.IS_NAN:
            return m.is_nan(b, x)
        inf = ir.Constant(t, math.inf)
        if op == UnaryOp.IS_INF:
            return b.fcmp_ordered("==", m.intr(b, "llvm.fabs", x), inf)
        if op == UnaryOp.IS_FINITE:
            return b.fcmp_ordered("<", m.intr(b, "llvm.fabs", x), inf)
        raise NotImplementedError(op)

    # ------------------------------------------------------------------ binary
    def binary(self, b: ir.IRBuilder, op: BinaryOp, x: ir.Value, y: ir.Value, dtype: np.dtype) -> ir.Value:
        """``op(x, y)`` for operands of ``dtype``."""
        kind = dtype.kind
        m = self.m
        if op in _LOGICAL:
            x, y = m.nonzero(b, x), m.nonzero(b, y)
            return {BinaryOp.LOGICAL_AND: b.and_, BinaryOp.LOGICAL_OR: b.or_, BinaryOp.LOGICAL_XOR: b.xor}[op](x, y)
        if op in _BITWISE:
            return {BinaryOp.BITWISE_AND: b.and_, BinaryOp.BITWISE_OR: b.or_, BinaryOp.BITWISE_XOR: b.xor}[op](x, y)
        if kind == "f":
            return self._float_binary(b, op, x, y)
        if op in _COMPARE:
            cmp = b.icmp_signed if kind == "i" else b.icmp_unsigned
            return cmp(_COMPARE[op], x, y)
        if kind == "b":  # maximum / minimum of bools
            return b.or_(x, y) if op == BinaryOp.MAXIMUM else b.and_(x, y)
        signed = kind == "i"
        cmp = b.icmp_signed if signed else b.icmp_unsigned
        if op == BinaryOp.ADD:
            return b.add(x, y)
        if op == BinaryOp.SUB:
            return b.sub(x, y)
        if op == BinaryOp.MUL:
            return b.mul(x, y)
        if op == BinaryOp.MAXIMUM:
            return b.select(cmp(">", x, y), x, y)
        if op == BinaryOp.MINIMUM:
            return b.select(cmp("<", x, y), x, y)
        if op in (BinaryOp.FLOOR_DIV, BinaryOp.REMAINDER):
            return self._int_divmod(b, op, x, y, signed)
        if op in (BinaryOp.LEFT_SHIFT, BinaryOp.RIGHT_SHIFT):
            return self._shift(b, op, x, y, signed)
        raise NotImplementedError(op)

    def _float_binary(self, b: ir.IRBuilder, op: BinaryOp, x: ir.Value, y: ir.Value) -> ir.Value:
        m = self.m
        if op == BinaryOp.ADD:
            return b.fadd(x, y)
        if op == BinaryOp.SUB:
            return b.fsub(x, y)
        if op == BinaryOp.MUL:
            return b.fmul(x, y)
        if op == BinaryOp.DIV:
            return b.fdiv(x, y)
        if op == BinaryOp.MAXIMUM:
            return m.fmax(b, x, y)
        if op == BinaryOp.MINIMUM:
            return m.fmin(b, x, y)
        if op in _COMPARE:
            if op == BinaryOp.NE:
                return b.fcmp_unordered("!=", x, y)
            return b.fcmp_ordered(_COMPARE[op], x, y)
        if op == BinaryOp.POW:
            return m.call(b, "pow", x, y)
        if op == BinaryOp.ATAN2:
            return m.call(b, "atan2", x, y)
        if op == BinaryOp.COPYSIGN:
            return m.intr(b, "llvm.copysign", x, y)
        if op in (BinaryOp.REMAINDER, BinaryOp.FLOOR_DIV):
            return self._float_divmod(b, op, x, y)
        raise NotImplementedError(op)

    def _float_divmod(self, b: ir.IRBuilder, op: BinaryOp, x: ir.Value, y: ir.Value) -> ir.Value:
        """numpy's ``divmod`` for floats: the remainder takes the divisor's sign and the
        quotient is floored; a zero divisor gives ``x / 0`` and ``fmod(x, 0)``."""
        m = self.m
        t = x.type
        zero, one = ir.Constant(t, 0.0), ir.Constant(t, 1.0)
        mod = b.frem(x, y)
        y_zero = b.fcmp_ordered("==", y, zero)
        mod_nonzero = b.fcmp_unordered("!=", mod, zero)
        flip = b.and_(mod_nonzero, b.xor(b.fcmp_ordered("<", y, zero), b.fcmp_ordered("<", mod, zero)))
        fixed_mod = b.select(flip, b.fadd(mod, y), b.select(mod_nonzero, mod, m.intr(b, "llvm.copysign", zero, y)))
        if op == BinaryOp.REMAINDER:
            return b.select(y_zero, mod, fixed_mod)
        div = b.fdiv(b.fsub(x, mod), y)
        div = b.select(flip, b.fsub(div, one), div)
        floor = m.intr(b, "llvm.floor", div)
        floor = b.select(b.fcmp_ordered(">", b.fsub(div, floor), ir.Constant(t, 0.5)), b.fadd(floor, one), floor)
        quotient = b.fdiv(x, y)
        floor = b.select(b.fcmp_unordered("!=", div, zero), floor, m.intr(b, "llvm.copysign", zero, quotient))
        return b.select(y_zero, quotient, floor)

    def _int_divmod(self, b: ir.IRBuilder, op: BinaryOp, x: ir.Value, y: ir.Value, signed: bool) -> ir.Value:
        """Python's floor division and remainder; numpy gives 0 for a zero divisor and
        wraps ``MIN // -1``."""
        t = x.type
        zero, one = ir.Constant(t, 0), ir.Constant(t, 1)
        y_zero = b.icmp_unsigned("==", y, zero)
        safe_y = b.select(y_zero, one, y)
        if not signed:
            out = b.udiv(x, safe_y) if op == BinaryOp.FLOOR_DIV else b.urem(x, safe_y)
            return b.select(y_zero, zero, out)
        minus_one = b.icmp_signed("==", safe_y, ir.Constant(t, -1))
        safe_y = b.select(minus_one, one, safe_y)  # x / -1 is -x (wrapping); avoid sdiv's overflow
        q = b.sdiv(x, safe_y)
        r = b.srem(x, safe_y)
        fix = b.and_(b.icmp_signed("!=", r, zero), b.xor(b.icmp_signed("<", r, zero), b.icmp_signed("<", y, zero)))
        if op == BinaryOp.FLOOR_DIV:
            q = b.select(fix, b.sub(q, one), q)
            q = b.select(minus_one, b.sub(zero, x), q)
            return b.select(y_zero, zero, q)
        r = b.select(fix, b.add(r, y), r)
        r = b.select(minus_one, zero, r)
        return b.select(y_zero, zero, r)

    def _shift(self, b: ir.IRBuilder, op: BinaryOp, x: ir.Value, y: ir.Value, signed: bool) -> ir.Value:
        t = x.type
        width = ir.Constant(t, t.width)
        in_range = b.icmp_unsigned("<", y, width)  # a negative amount is a huge unsigned one
        safe = b.select(in_range, y, ir.Constant(t, 0))
        zero = ir.Constant(t, 0)
        if op == BinaryOp.LEFT_SHIFT:
            return b.select(in_range, b.shl(x, safe), zero)
        if not signed:
            return b.select(in_range, b.lshr(x, safe), zero)
        past = b.select(b.icmp_signed("<", x, zero), ir.Constant(t, -1), zero)
        return b.select(in_range, b.ashr(x, safe), past)

    # ------------------------------------------------------------------ others
    def clamp(
        self, b: ir.IRBuilder, x: ir.Value, low: ir.Value | None, high: ir.Value | None, dtype: np.dtype
    ) -> ir.Value:
        """``np.clip``: ``minimum(maximum(x, low), high)``."""
        if low is not None:
            x = self.binary(b, BinaryOp.MAXIMUM, x, low, dtype)
        if high is not None:
            x = self.binary(b, BinaryOp.MINIMUM, x, high, dtype)
        return x


__all__ = ["F32", "F64", "I1", "LOWERED_BINARY", "LOWERED_UNARY", "OpEmitter", "lowers_cast"]
