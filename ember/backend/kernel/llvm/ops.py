"""The elementwise ops of the protocol as LLVM IR, with flex's (numpy's) semantics.

:class:`OpEmitter` turns one :class:`~ember.backend.kernel.exprs.Expr` node into IR
given its operands' IR values: unary and binary ops per dtype family, ``where``,
``clamp`` and casts. What is lowered per dtype kind (:data:`LOWERED_UNARY`,
:data:`LOWERED_BINARY`) and each float function's spelling come from the kernel
layer's op table (:mod:`ember.backend.kernel.op_table`), shared with the CUDA C and
WGSL printers; anything else runs eagerly on flex.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from llvmlite import ir

from ember.backend.kernel.llvm.mathlib import F32, F64, I1, MathLib, reg_type
from ember.backend.kernel.op_table import (
    BINARY_MATH,
    BITWISE,
    COMPARE,
    KERNEL_MATH,
    LOGICAL,
    LOWERED_BINARY,
    LOWERED_UNARY,
    UNARY_MATH,
    KernelFn,
    MathFn,
)
from ember.backend.ops import BinaryOp, UnaryOp


def lowers_cast(src: np.dtype, dst: np.dtype) -> bool:
    """Casts compiled code performs exactly as numpy does (float to uint8 is not one:
    numpy wraps through a wider integer)."""
    return not (src.kind == "f" and dst.kind == "u")


class OpEmitter:
    """Emits the IR of elementwise ops (see the module docstring)."""

    def __init__(self, math_lib: MathLib):
        self.m = math_lib

    def apply(self, b: ir.IRBuilder, e: Any, args: list[Any]) -> ir.Value:
        """The value of the elementwise expression ``e`` (a kernel IR ``Expr`` of kind
        unary, binary, where, clamp or cast) from its arguments' values."""
        kind = e.kind
        if kind == "unary":
            return self.unary(b, e.op, args[0], e.args[0].dtype)
        if kind == "binary":
            return self.binary(b, e.op, args[0], args[1], e.args[0].dtype)
        if kind == "where":
            return b.select(args[0], args[1], args[2])
        if kind == "clamp":
            return self.clamp(b, args[0], args[1], args[2], e.dtype)
        if kind == "cast":
            return self.cast(b, args[0], e.args[0].dtype, e.dtype)
        raise AssertionError(f"{kind} is not an elementwise expression")

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

    # ------------------------------------------------------------------ float functions
    def math(self, b: ir.IRBuilder, fn: MathFn, *args: ir.Value) -> ir.Value:
        """The float function ``fn`` (an entry of the kernel layer's op table) of
        ``args``: its intrinsic, its float32 decomposition, or a libm call."""
        m = self.m
        if fn.llvm_intrinsic is not None:
            return m.intr(b, fn.llvm_intrinsic, *args)
        f32 = args[0].type == F32
        if f32 and fn.llvm_f32 is not None:
            return getattr(m, fn.llvm_f32)(b, *args)
        if f32 and fn.f32_via_f64:
            return b.fptrunc(m.call(b, fn.c, *(b.fpext(a, F64) for a in args)), F32)
        return m.call(b, fn.c, *args)

    # ------------------------------------------------------------------ unary
    def unary(self, b: ir.IRBuilder, op: UnaryOp | KernelFn, x: ir.Value, dtype: np.dtype) -> ir.Value:
        kind = dtype.kind
        if isinstance(op, KernelFn):
            if x.type != F32:  # float32 decompositions only (flex's native kernels)
                raise NotImplementedError(f"{op.value} of {dtype}")
            return self.math(b, KERNEL_MATH[op], x)
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
        fn = UNARY_MATH.get(op)
        if fn is not None:
            return self.math(b, fn, x)
        if op == UnaryOp.NEG:
            return b.fneg(x)
        if op == UnaryOp.RSQRT:
            return b.fdiv(one, m.intr(b, "llvm.sqrt", x))
        if op == UnaryOp.RECIP:
            return b.fdiv(one, x)
        if op == UnaryOp.SIGN:  # +-0 and NaN give +0 (Burn's and PyTorch's rule)
            zero = ir.Constant(t, 0.0)
            out = b.select(b.fcmp_ordered("<", x, zero), ir.Constant(t, -1.0), zero)
            return b.select(b.fcmp_ordered(">", x, zero), one, out)
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
        if op in LOGICAL:
            x, y = m.nonzero(b, x), m.nonzero(b, y)
            return {BinaryOp.LOGICAL_AND: b.and_, BinaryOp.LOGICAL_OR: b.or_, BinaryOp.LOGICAL_XOR: b.xor}[op](x, y)
        if op in BITWISE:
            return {BinaryOp.BITWISE_AND: b.and_, BinaryOp.BITWISE_OR: b.or_, BinaryOp.BITWISE_XOR: b.xor}[op](x, y)
        if kind == "f":
            return self._float_binary(b, op, x, y)
        if op in COMPARE:
            cmp = b.icmp_signed if kind == "i" else b.icmp_unsigned
            return cmp(COMPARE[op], x, y)
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
        if op in COMPARE:
            if op == BinaryOp.NE:
                return b.fcmp_unordered("!=", x, y)
            return b.fcmp_ordered(COMPARE[op], x, y)
        fn = BINARY_MATH.get(op)
        if fn is not None:
            return self.math(b, fn, x, y)
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
