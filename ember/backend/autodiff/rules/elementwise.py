"""Elementwise ops: forward recording and backward steps side by side.

``UNARY`` and ``BINARY`` are the gradient tables: per op, which values the step
needs and the local gradient. Ops absent from the tables (comparisons, logic,
rounding with zero gradient excluded) give untracked results.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

from ember.backend.autodiff.graph import AutodiffTensor
from ember.backend.autodiff.rules.common import RecordMixin, unbroadcast, zeros_like
from ember.backend.autodiff.rules.spectral import COMPLEX_NP, conj
from ember.backend.dtype import DType
from ember.backend.ops import BinaryOp, UnaryOp

X, OUT = 1, 2  # what a unary step needs
LHS, RHS, RES = 1, 2, 4  # what a binary step needs
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_LN2 = math.log(2.0)
_LN10 = math.log(10.0)


def _mul(ops, a, b):
    return ops.binary(BinaryOp.MUL, a, b)


def _zero_grad(ops, g, x, out):
    return zeros_like(ops, g)


UNARY: dict[str, tuple[int, Any]] = {
    UnaryOp.NEG: (0, lambda ops, g, x, out: ops.unary(UnaryOp.NEG, g)),
    UnaryOp.ABS: (X, lambda ops, g, x, out: _mul(ops, g, ops.unary(UnaryOp.SIGN, x))),
    UnaryOp.EXP: (OUT, lambda ops, g, x, out: _mul(ops, g, out)),
    UnaryOp.LOG: (X, lambda ops, g, x, out: ops.binary(BinaryOp.DIV, g, x)),
    UnaryOp.LOG1P: (X, lambda ops, g, x, out: ops.binary(BinaryOp.DIV, g, ops.binary(BinaryOp.ADD, x, 1.0))),
    UnaryOp.EXPM1: (OUT, lambda ops, g, x, out: _mul(ops, g, ops.binary(BinaryOp.ADD, out, 1.0))),
    UnaryOp.SQRT: (OUT, lambda ops, g, x, out: ops.binary(BinaryOp.DIV, g, _mul(ops, out, 2.0))),
    UnaryOp.RSQRT: (OUT, lambda ops, g, x, out: _mul(ops, _mul(ops, g, _mul(ops, out, _mul(ops, out, out))), -0.5)),
    UnaryOp.RECIP: (OUT, lambda ops, g, x, out: ops.unary(UnaryOp.NEG, _mul(ops, g, _mul(ops, out, out)))),
    UnaryOp.SQUARE: (X, lambda ops, g, x, out: _mul(ops, g, _mul(ops, x, 2.0))),
    UnaryOp.SIN: (X, lambda ops, g, x, out: _mul(ops, g, ops.unary(UnaryOp.COS, x))),
    UnaryOp.COS: (X, lambda ops, g, x, out: ops.unary(UnaryOp.NEG, _mul(ops, g, ops.unary(UnaryOp.SIN, x)))),
    UnaryOp.TAN: (OUT, lambda ops, g, x, out: _mul(ops, g, ops.binary(BinaryOp.ADD, _mul(ops, out, out), 1.0))),
    UnaryOp.TANH: (
        OUT,
        lambda ops, g, x, out: _mul(
            ops, g, ops.binary(BinaryOp.SUB, ops.full((), 1, DType.from_numpy(out.dtype)), _mul(ops, out, out))
        ),
    ),
    UnaryOp.SINH: (X, lambda ops, g, x, out: _mul(ops, g, ops.unary(UnaryOp.COSH, x))),
    UnaryOp.COSH: (X, lambda ops, g, x, out: _mul(ops, g, ops.unary(UnaryOp.SINH, x))),
    UnaryOp.ASIN: (X, lambda ops, g, x, out: _mul(ops, g, ops.unary(UnaryOp.RSQRT, _one_minus_sq(ops, x)))),
    UnaryOp.ACOS: (
        X,
        lambda ops, g, x, out: ops.unary(UnaryOp.NEG, _mul(ops, g, ops.unary(UnaryOp.RSQRT, _one_minus_sq(ops, x)))),
    ),
    UnaryOp.ATAN: (
        X,
        lambda ops, g, x, out: ops.binary(BinaryOp.DIV, g, ops.binary(BinaryOp.ADD, _mul(ops, x, x), 1.0)),
    ),
    UnaryOp.ERF: (
        X,
        lambda ops, g, x, out: _mul(
            ops, g, _mul(ops, ops.unary(UnaryOp.EXP, ops.unary(UnaryOp.NEG, _mul(ops, x, x))), _TWO_OVER_SQRT_PI)
        ),
    ),
    UnaryOp.LOG2: (X, lambda ops, g, x, out: ops.binary(BinaryOp.DIV, g, _mul(ops, x, _LN2))),
    UnaryOp.LOG10: (X, lambda ops, g, x, out: ops.binary(BinaryOp.DIV, g, _mul(ops, x, _LN10))),
    UnaryOp.EXP2: (OUT, lambda ops, g, x, out: _mul(ops, g, _mul(ops, out, _LN2))),
    UnaryOp.ASINH: (
        X,
        lambda ops, g, x, out: _mul(ops, g, ops.unary(UnaryOp.RSQRT, ops.binary(BinaryOp.ADD, _mul(ops, x, x), 1.0))),
    ),
    UnaryOp.ACOSH: (
        X,
        lambda ops, g, x, out: _mul(
            ops,
            g,
            ops.unary(UnaryOp.RSQRT, _mul(ops, ops.binary(BinaryOp.SUB, x, 1.0), ops.binary(BinaryOp.ADD, x, 1.0))),
        ),
    ),
    UnaryOp.ATANH: (X, lambda ops, g, x, out: ops.binary(BinaryOp.DIV, g, _one_minus_sq(ops, x))),
    UnaryOp.SIGN: (0, _zero_grad),
    UnaryOp.ROUND: (0, _zero_grad),
    UnaryOp.FLOOR: (0, _zero_grad),
    UnaryOp.CEIL: (0, _zero_grad),
    UnaryOp.TRUNC: (0, _zero_grad),
}


def _one_minus_sq(ops, x):
    return ops.binary(BinaryOp.SUB, ops.full((), 1, DType.from_numpy(x.dtype)), _mul(ops, x, x))


def _max_grad(ops, g, a, b, out, first: bool):
    """max/min split the gradient evenly on ties, as PyTorch."""
    win = ops.binary(BinaryOp.EQ, a if first else b, out)
    tie = ops.binary(BinaryOp.EQ, a, b)
    half = _mul(ops, g, 0.5)
    return ops.where(tie, half, ops.where(win, g, 0.0))


def _pow_grad_exponent(ops, g, a, b, out):
    """``g * a^b * log(a)``; 0 where ``a = 0`` and ``b >= 0`` (PyTorch's convention:
    ``0^b`` is flat in ``b`` there, and ``0 * log(0)`` would be NaN)."""
    log_a = ops.unary(UnaryOp.LOG, a)
    grad = _mul(ops, g, _mul(ops, out, log_a))
    flat = ops.binary(BinaryOp.LOGICAL_AND, ops.binary(BinaryOp.EQ, a, 0.0), ops.binary(BinaryOp.GE, b, 0.0))
    return ops.where(flat, 0.0, grad)


def _pow_grad_base(ops, g, a, b, out):
    """``g * b * a^(b-1)``; 0 where ``b = 0`` (``a^0 = 1`` is flat, even at ``a = 0``,
    where ``0 * 0^-1`` would be NaN), as PyTorch."""
    if not isinstance(b, (int, float)):
        grad = _mul(ops, g, _mul(ops, b, ops.binary(BinaryOp.POW, a, ops.binary(BinaryOp.SUB, b, 1.0))))
        return ops.where(ops.binary(BinaryOp.EQ, b, 0.0), 0.0, grad)
    if b == 0:
        return zeros_like(ops, g)
    return _mul(ops, g, _mul(ops, ops.binary(BinaryOp.POW, a, b - 1.0), b))


def _copysign_grad(ops, g, a, b, out):
    """``g * out / a`` (the sign flip), zero where ``a`` is zero (as PyTorch)."""
    zero = ops.binary(BinaryOp.EQ, a, 0.0)
    ratio = ops.binary(BinaryOp.DIV, out, ops.where(zero, 1.0, a))
    return ops.where(zero, 0.0, _mul(ops, g, ratio))


def _atan2_grad(ops, g, a, b, numerator):
    """``g * numerator / (a^2 + b^2)``, zero where a = b = 0 (as PyTorch)."""
    denominator = ops.binary(BinaryOp.ADD, _mul(ops, a, a), _mul(ops, b, b))
    zero = ops.binary(BinaryOp.EQ, denominator, 0.0)
    safe = ops.where(zero, 1.0, denominator)
    return ops.where(zero, 0.0, ops.binary(BinaryOp.DIV, _mul(ops, g, numerator), safe))


# op: (needs, grad wrt a, grad wrt b); each grad is f(ops, g, a, b, out)
BINARY: dict[str, tuple[int, Any, Any]] = {
    BinaryOp.ADD: (0, lambda ops, g, a, b, o: g, lambda ops, g, a, b, o: g),
    BinaryOp.SUB: (0, lambda ops, g, a, b, o: g, lambda ops, g, a, b, o: ops.unary(UnaryOp.NEG, g)),
    BinaryOp.MUL: (LHS | RHS, lambda ops, g, a, b, o: _mul(ops, g, b), lambda ops, g, a, b, o: _mul(ops, g, a)),
    BinaryOp.DIV: (
        RHS | RES,
        lambda ops, g, a, b, o: ops.binary(BinaryOp.DIV, g, b),
        lambda ops, g, a, b, o: ops.unary(UnaryOp.NEG, ops.binary(BinaryOp.DIV, _mul(ops, g, o), b)),
    ),
    BinaryOp.POW: (LHS | RHS | RES, _pow_grad_base, _pow_grad_exponent),
    BinaryOp.REMAINDER: (
        LHS | RHS,
        lambda ops, g, a, b, o: g,
        lambda ops, g, a, b, o: ops.unary(UnaryOp.NEG, _mul(ops, g, ops.binary(BinaryOp.FLOOR_DIV, a, b))),
    ),
    BinaryOp.ATAN2: (
        LHS | RHS,
        lambda ops, g, a, b, o: _atan2_grad(ops, g, a, b, b),
        lambda ops, g, a, b, o: ops.unary(UnaryOp.NEG, _atan2_grad(ops, g, a, b, a)),
    ),
    BinaryOp.COPYSIGN: (LHS | RES, _copysign_grad, lambda ops, g, a, b, o: zeros_like(ops, g)),
    BinaryOp.MAXIMUM: (LHS | RHS | RES, partial(_max_grad, first=True), partial(_max_grad, first=False)),
    BinaryOp.MINIMUM: (LHS | RHS | RES, partial(_max_grad, first=True), partial(_max_grad, first=False)),
}


def _unary_step(ops, g, saved, op):
    x, out = saved
    return (UNARY[op][1](ops, g, x, out),)


def _unary_step_complex(ops, g, saved, op):
    """A holomorphic ``f`` with real Taylor coefficients: ``g * conj(f'(z)) = g * f'(conj z)``."""
    x, out = saved
    return (UNARY[op][1](ops, g, conj(ops, x), conj(ops, out)),)


def _binary_step_complex(ops, g, saved, ctx):
    a, b, out = saved
    return _binary_step(ops, g, (conj(ops, a), conj(ops, b), conj(ops, out)), ctx)


def _binary_step(ops, g, saved, ctx):
    op, shape_a, shape_b = ctx
    a, b, out = saved
    rule = BINARY[op]
    ga = None if shape_a is None else unbroadcast(ops, rule[1](ops, g, a, b, out), shape_a)
    gb = None if shape_b is None else unbroadcast(ops, rule[2](ops, g, a, b, out), shape_b)
    return (ga, gb)


def _where_step(ops, g, saved, ctx):
    (cond,) = saved
    shape_a, shape_b = ctx
    ga = None if shape_a is None else unbroadcast(ops, ops.where(cond, g, 0.0), shape_a)
    gb = None if shape_b is None else unbroadcast(ops, ops.where(cond, 0.0, g), shape_b)
    return (ga, gb)


def _clamp_step(ops, g, saved, ctx):
    (x,) = saved
    low, high = ctx
    inside = None
    if low is not None:
        inside = ops.binary(BinaryOp.GE, x, low)
    if high is not None:
        below = ops.binary(BinaryOp.LE, x, high)
        inside = below if inside is None else ops.binary(BinaryOp.LOGICAL_AND, inside, below)
    return (ops.where(inside, g, 0.0),)


def _cast_step(ops, g, saved, source):
    return (ops.cast(g, source),)


class ElementwiseRules(RecordMixin):
    """Recording of elementwise ops (all memory-bound: recomputed under balanced
    checkpointing)."""

    def unary(self, op: UnaryOp, x: AutodiffTensor) -> AutodiffTensor:
        inner = self.inner
        out = inner.unary(op, x.inner)
        node = x.node
        rule = UNARY.get(op)
        if node is None or rule is None:
            return AutodiffTensor(out, None)
        needs = rule[0]
        saved = (self._keep(x) if needs & X else None, self._out(out, True) if needs & OUT else None)
        recompute = (partial(inner.unary, op), (self._keep(x),)) if self._balanced else None
        step = _unary_step_complex if out.dtype in COMPLEX_NP else _unary_step
        return self._record(out, (node,), step, saved, op, recompute)

    def binary(self, op: BinaryOp, a: AutodiffTensor, b: Any) -> AutodiffTensor:
        inner = self.inner
        if type(b) is AutodiffTensor:
            out = inner.binary(op, a.inner, b.inner)
            na, nb = a.node, b.node
            rule = BINARY.get(op)
            if (na is None and nb is None) or rule is None:
                return AutodiffTensor(out, None)
            needs = rule[0]
            saved = (
                self._keep(a) if needs & LHS else None,
                self._keep(b) if needs & RHS else None,
                self._out(out, True) if needs & RES else None,
            )
            ctx = (op, None if na is None else a.shape, None if nb is None else b.shape)
            recompute: tuple[Any, tuple] | None = (
                (partial(inner.binary, op), (self._keep(a), self._keep(b))) if self._balanced else None
            )
            step = _binary_step_complex if out.dtype in COMPLEX_NP else _binary_step
            return self._record(out, (na, nb), step, saved, ctx, recompute)
        out = inner.binary(op, a.inner, b)
        na = a.node
        rule = BINARY.get(op)
        if na is None or rule is None:
            return AutodiffTensor(out, None)
        needs = rule[0]
        saved = (self._keep(a) if needs & LHS else None, b, self._out(out, True) if needs & RES else None)
        recompute = (partial(_binary_scalar, inner, op, b), (self._keep(a),)) if self._balanced else None
        step = _binary_step_complex if out.dtype in COMPLEX_NP else _binary_step
        return self._record(out, (na, None), step, saved, (op, a.shape, None), recompute)

    def where(self, cond: AutodiffTensor, a: Any, b: Any) -> AutodiffTensor:
        ta, tb = type(a) is AutodiffTensor, type(b) is AutodiffTensor
        out = self.inner.where(cond.inner, a.inner if ta else a, b.inner if tb else b)
        na = a.node if ta else None
        nb = b.node if tb else None
        if na is None and nb is None:
            return AutodiffTensor(out, None)
        ctx = (None if na is None else a.shape, None if nb is None else b.shape)
        recompute = None
        if self._balanced:
            handles = (cond.inner, self._keep(a) if ta else a, self._keep(b) if tb else b)
            recompute = (self.inner.where, handles)
        return self._record(out, (na, nb), _where_step, (cond,), ctx, recompute)

    def clamp(self, x: AutodiffTensor, low: Any, high: Any) -> AutodiffTensor:
        out = self.inner.clamp(x.inner, low, high)
        if x.node is None:
            return AutodiffTensor(out, None)
        recompute = (partial(_clamp, self.inner, low, high), (self._keep(x),)) if self._balanced else None
        return self._record(out, (x.node,), _clamp_step, (self._keep(x),), (low, high), recompute)

    def cast(self, x: AutodiffTensor, dtype: DType) -> AutodiffTensor:
        out = self.inner.cast(x.inner, dtype)
        if x.node is None or not (dtype.is_float or dtype.is_complex):
            return AutodiffTensor(out, None)
        source = DType.from_numpy(x.dtype)
        recompute = (partial(_cast, self.inner, dtype), (self._keep(x),)) if self._balanced else None
        return self._record(out, (x.node,), _cast_step, (), source, recompute)


def _binary_scalar(inner, op, scalar, a):
    return inner.binary(op, a, scalar)


def _clamp(inner, low, high, x):
    return inner.clamp(x, low, high)


def _cast(inner, dtype, x):
    return inner.cast(x, dtype)
