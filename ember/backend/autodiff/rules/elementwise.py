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
from ember.backend.dtype import DType

X, OUT = 1, 2  # what a unary step needs
LHS, RHS, RES = 1, 2, 4  # what a binary step needs
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _mul(ops, a, b):
    return ops.binary("mul", a, b)


def _zero_grad(ops, g, x, out):
    return zeros_like(ops, g)


UNARY: dict[str, tuple[int, Any]] = {
    "neg": (0, lambda ops, g, x, out: ops.unary("neg", g)),
    "abs": (X, lambda ops, g, x, out: _mul(ops, g, ops.unary("sign", x))),
    "exp": (OUT, lambda ops, g, x, out: _mul(ops, g, out)),
    "log": (X, lambda ops, g, x, out: ops.binary("div", g, x)),
    "log1p": (X, lambda ops, g, x, out: ops.binary("div", g, ops.binary("add", x, 1.0))),
    "expm1": (OUT, lambda ops, g, x, out: _mul(ops, g, ops.binary("add", out, 1.0))),
    "sqrt": (OUT, lambda ops, g, x, out: ops.binary("div", g, _mul(ops, out, 2.0))),
    "rsqrt": (OUT, lambda ops, g, x, out: _mul(ops, _mul(ops, g, _mul(ops, out, _mul(ops, out, out))), -0.5)),
    "recip": (OUT, lambda ops, g, x, out: ops.unary("neg", _mul(ops, g, _mul(ops, out, out)))),
    "square": (X, lambda ops, g, x, out: _mul(ops, g, _mul(ops, x, 2.0))),
    "sin": (X, lambda ops, g, x, out: _mul(ops, g, ops.unary("cos", x))),
    "cos": (X, lambda ops, g, x, out: ops.unary("neg", _mul(ops, g, ops.unary("sin", x)))),
    "tan": (OUT, lambda ops, g, x, out: _mul(ops, g, ops.binary("add", _mul(ops, out, out), 1.0))),
    "tanh": (OUT, lambda ops, g, x, out: _mul(ops, g, ops.binary("sub", ops.full((), 1, DType.from_numpy(out.dtype)), _mul(ops, out, out)))),
    "sinh": (X, lambda ops, g, x, out: _mul(ops, g, ops.unary("cosh", x))),
    "cosh": (X, lambda ops, g, x, out: _mul(ops, g, ops.unary("sinh", x))),
    "asin": (X, lambda ops, g, x, out: _mul(ops, g, ops.unary("rsqrt", _one_minus_sq(ops, x)))),
    "acos": (X, lambda ops, g, x, out: ops.unary("neg", _mul(ops, g, ops.unary("rsqrt", _one_minus_sq(ops, x))))),
    "atan": (X, lambda ops, g, x, out: ops.binary("div", g, ops.binary("add", _mul(ops, x, x), 1.0))),
    "erf": (X, lambda ops, g, x, out: _mul(ops, g, _mul(ops, ops.unary("exp", ops.unary("neg", _mul(ops, x, x))), _TWO_OVER_SQRT_PI))),
    "sign": (0, _zero_grad),
    "round": (0, _zero_grad),
    "floor": (0, _zero_grad),
    "ceil": (0, _zero_grad),
    "trunc": (0, _zero_grad),
}


def _one_minus_sq(ops, x):
    return ops.binary("sub", ops.full((), 1, DType.from_numpy(x.dtype)), _mul(ops, x, x))


def _max_grad(ops, g, a, b, out, first: bool):
    """max/min split the gradient evenly on ties, as PyTorch."""
    win = ops.binary("eq", a if first else b, out)
    tie = ops.binary("eq", a, b)
    half = _mul(ops, g, 0.5)
    return ops.where(tie, half, ops.where(win, g, 0.0))


def _pow_grad_exponent(ops, g, a, b, out):
    log_a = ops.unary("log", a)
    grad = _mul(ops, g, _mul(ops, out, log_a))
    return ops.where(ops.binary("eq", a, 0.0), 0.0, grad)


def _pow_grad_base(ops, g, a, b, out):
    if not isinstance(b, (int, float)):
        return _mul(ops, g, _mul(ops, b, ops.binary("pow", a, ops.binary("sub", b, 1.0))))
    if b == 0:
        return zeros_like(ops, g)
    return _mul(ops, g, _mul(ops, ops.binary("pow", a, b - 1.0), b))


def _atan2_grad(ops, g, a, b, numerator):
    """``g * numerator / (a^2 + b^2)``, zero where a = b = 0 (as PyTorch)."""
    denominator = ops.binary("add", _mul(ops, a, a), _mul(ops, b, b))
    zero = ops.binary("eq", denominator, 0.0)
    safe = ops.where(zero, 1.0, denominator)
    return ops.where(zero, 0.0, ops.binary("div", _mul(ops, g, numerator), safe))


# op: (needs, grad wrt a, grad wrt b); each grad is f(ops, g, a, b, out)
BINARY: dict[str, tuple[int, Any, Any]] = {
    "add": (0, lambda ops, g, a, b, o: g, lambda ops, g, a, b, o: g),
    "sub": (0, lambda ops, g, a, b, o: g, lambda ops, g, a, b, o: ops.unary("neg", g)),
    "mul": (LHS | RHS, lambda ops, g, a, b, o: _mul(ops, g, b), lambda ops, g, a, b, o: _mul(ops, g, a)),
    "div": (
        RHS | RES,
        lambda ops, g, a, b, o: ops.binary("div", g, b),
        lambda ops, g, a, b, o: ops.unary("neg", ops.binary("div", _mul(ops, g, o), b)),
    ),
    "pow": (LHS | RHS | RES, _pow_grad_base, _pow_grad_exponent),
    "remainder": (
        LHS | RHS,
        lambda ops, g, a, b, o: g,
        lambda ops, g, a, b, o: ops.unary("neg", _mul(ops, g, ops.binary("floor_div", a, b))),
    ),
    "atan2": (
        LHS | RHS,
        lambda ops, g, a, b, o: _atan2_grad(ops, g, a, b, b),
        lambda ops, g, a, b, o: ops.unary("neg", _atan2_grad(ops, g, a, b, a)),
    ),
    "maximum": (LHS | RHS | RES, partial(_max_grad, first=True), partial(_max_grad, first=False)),
    "minimum": (LHS | RHS | RES, partial(_max_grad, first=True), partial(_max_grad, first=False)),
}


def _unary_step(ops, g, saved, op):
    x, out = saved
    return (UNARY[op][1](ops, g, x, out),)


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
        inside = ops.binary("ge", x, low)
    if high is not None:
        below = ops.binary("le", x, high)
        inside = below if inside is None else ops.binary("logical_and", inside, below)
    return (ops.where(inside, g, 0.0),)


def _cast_step(ops, g, saved, source):
    return (ops.cast(g, source),)


class ElementwiseRules(RecordMixin):
    """Recording of elementwise ops (all memory-bound: recomputed under balanced
    checkpointing)."""

    def unary(self, op: str, x: AutodiffTensor) -> AutodiffTensor:
        inner = self.inner
        out = inner.unary(op, x.inner)
        node = x.node
        rule = UNARY.get(op)
        if node is None or rule is None:
            return AutodiffTensor(out, None)
        needs = rule[0]
        saved = (self._keep(x) if needs & X else None, self._out(out, True) if needs & OUT else None)
        recompute = (partial(inner.unary, op), (self._keep(x),)) if self._balanced else None
        return self._record(out, (node,), _unary_step, saved, op, recompute)

    def binary(self, op: str, a: AutodiffTensor, b: Any) -> AutodiffTensor:
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
            recompute = (partial(inner.binary, op), (self._keep(a), self._keep(b))) if self._balanced else None
            return self._record(out, (na, nb), _binary_step, saved, ctx, recompute)
        out = inner.binary(op, a.inner, b)
        na = a.node
        rule = BINARY.get(op)
        if na is None or rule is None:
            return AutodiffTensor(out, None)
        needs = rule[0]
        saved = (self._keep(a) if needs & LHS else None, b, self._out(out, True) if needs & RES else None)
        recompute = (partial(_binary_scalar, inner, op, b), (self._keep(a),)) if self._balanced else None
        return self._record(out, (na, None), _binary_step, saved, (op, a.shape, None), recompute)

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
        return self._record(out, (na, nb), _where_step, (cond.inner,), ctx, recompute)

    def clamp(self, x: AutodiffTensor, low: Any, high: Any) -> AutodiffTensor:
        out = self.inner.clamp(x.inner, low, high)
        if x.node is None:
            return AutodiffTensor(out, None)
        recompute = (partial(_clamp, self.inner, low, high), (self._keep(x),)) if self._balanced else None
        return self._record(out, (x.node,), _clamp_step, (self._keep(x),), (low, high), recompute)

    def cast(self, x: AutodiffTensor, dtype: DType) -> AutodiffTensor:
        out = self.inner.cast(x.inner, dtype)
        if x.node is None or not dtype.is_float:
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
