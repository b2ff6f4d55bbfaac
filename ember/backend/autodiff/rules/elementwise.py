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
A, B_, O = 1, 2, 4  # what a binary step needs
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _mul(B, a, b):
    return B.binary("mul", a, b)


def _zero_grad(B, g, x, out):
    return zeros_like(B, g)


UNARY: dict[str, tuple[int, Any]] = {
    "neg": (0, lambda B, g, x, out: B.unary("neg", g)),
    "abs": (X, lambda B, g, x, out: _mul(B, g, B.unary("sign", x))),
    "exp": (OUT, lambda B, g, x, out: _mul(B, g, out)),
    "log": (X, lambda B, g, x, out: B.binary("div", g, x)),
    "log1p": (X, lambda B, g, x, out: B.binary("div", g, B.binary("add", x, 1.0))),
    "expm1": (OUT, lambda B, g, x, out: _mul(B, g, B.binary("add", out, 1.0))),
    "sqrt": (OUT, lambda B, g, x, out: B.binary("div", g, _mul(B, out, 2.0))),
    "rsqrt": (OUT, lambda B, g, x, out: _mul(B, _mul(B, g, _mul(B, out, _mul(B, out, out))), -0.5)),
    "recip": (OUT, lambda B, g, x, out: B.unary("neg", _mul(B, g, _mul(B, out, out)))),
    "square": (X, lambda B, g, x, out: _mul(B, g, _mul(B, x, 2.0))),
    "sin": (X, lambda B, g, x, out: _mul(B, g, B.unary("cos", x))),
    "cos": (X, lambda B, g, x, out: B.unary("neg", _mul(B, g, B.unary("sin", x)))),
    "tan": (OUT, lambda B, g, x, out: _mul(B, g, B.binary("add", _mul(B, out, out), 1.0))),
    "tanh": (OUT, lambda B, g, x, out: _mul(B, g, B.binary("sub", B.full((), 1, DType.from_numpy(out.dtype)), _mul(B, out, out)))),
    "sinh": (X, lambda B, g, x, out: _mul(B, g, B.unary("cosh", x))),
    "cosh": (X, lambda B, g, x, out: _mul(B, g, B.unary("sinh", x))),
    "asin": (X, lambda B, g, x, out: _mul(B, g, B.unary("rsqrt", _one_minus_sq(B, x)))),
    "acos": (X, lambda B, g, x, out: B.unary("neg", _mul(B, g, B.unary("rsqrt", _one_minus_sq(B, x))))),
    "atan": (X, lambda B, g, x, out: B.binary("div", g, B.binary("add", _mul(B, x, x), 1.0))),
    "erf": (X, lambda B, g, x, out: _mul(B, g, _mul(B, B.unary("exp", B.unary("neg", _mul(B, x, x))), _TWO_OVER_SQRT_PI))),
    "sign": (0, _zero_grad),
    "round": (0, _zero_grad),
    "floor": (0, _zero_grad),
    "ceil": (0, _zero_grad),
    "trunc": (0, _zero_grad),
}


def _one_minus_sq(B, x):
    return B.binary("sub", B.full((), 1, DType.from_numpy(x.dtype)), _mul(B, x, x))


def _max_grad(B, g, a, b, out, first: bool):
    """max/min split the gradient evenly on ties, as PyTorch."""
    win = B.binary("eq", a if first else b, out)
    tie = B.binary("eq", a, b)
    half = _mul(B, g, 0.5)
    return B.where(tie, half, B.where(win, g, 0.0))


def _pow_grad_exponent(B, g, a, b, out):
    log_a = B.unary("log", a)
    grad = _mul(B, g, _mul(B, out, log_a))
    return B.where(B.binary("eq", a, 0.0), 0.0, grad)


def _pow_grad_base(B, g, a, b, out):
    if not isinstance(b, (int, float)):
        return _mul(B, g, _mul(B, b, B.binary("pow", a, B.binary("sub", b, 1.0))))
    if b == 0:
        return zeros_like(B, g)
    return _mul(B, g, _mul(B, B.binary("pow", a, b - 1.0), b))


def _atan2_denominator(B, a, b):
    return B.binary("add", _mul(B, a, a), _mul(B, b, b))


# op: (needs, grad wrt a, grad wrt b); each grad is f(B, g, a, b, out)
BINARY: dict[str, tuple[int, Any, Any]] = {
    "add": (0, lambda B, g, a, b, o: g, lambda B, g, a, b, o: g),
    "sub": (0, lambda B, g, a, b, o: g, lambda B, g, a, b, o: B.unary("neg", g)),
    "mul": (A | B_, lambda B, g, a, b, o: _mul(B, g, b), lambda B, g, a, b, o: _mul(B, g, a)),
    "div": (
        B_ | O,
        lambda B, g, a, b, o: B.binary("div", g, b),
        lambda B, g, a, b, o: B.unary("neg", B.binary("div", _mul(B, g, o), b)),
    ),
    "pow": (A | B_ | O, _pow_grad_base, _pow_grad_exponent),
    "remainder": (
        A | B_,
        lambda B, g, a, b, o: g,
        lambda B, g, a, b, o: B.unary("neg", _mul(B, g, B.binary("floor_div", a, b))),
    ),
    "atan2": (
        A | B_,
        lambda B, g, a, b, o: B.binary("div", _mul(B, g, b), _atan2_denominator(B, a, b)),
        lambda B, g, a, b, o: B.unary("neg", B.binary("div", _mul(B, g, a), _atan2_denominator(B, a, b))),
    ),
    "maximum": (A | B_ | O, partial(_max_grad, first=True), partial(_max_grad, first=False)),
    "minimum": (A | B_ | O, partial(_max_grad, first=True), partial(_max_grad, first=False)),
}


def _unary_step(B, g, saved, op):
    x, out = saved
    return (UNARY[op][1](B, g, x, out),)


def _binary_step(B, g, saved, ctx):
    op, shape_a, shape_b = ctx
    a, b, out = saved
    rule = BINARY[op]
    ga = None if shape_a is None else unbroadcast(B, rule[1](B, g, a, b, out), shape_a)
    gb = None if shape_b is None else unbroadcast(B, rule[2](B, g, a, b, out), shape_b)
    return (ga, gb)


def _where_step(B, g, saved, ctx):
    (cond,) = saved
    shape_a, shape_b = ctx
    ga = None if shape_a is None else unbroadcast(B, B.where(cond, g, 0.0), shape_a)
    gb = None if shape_b is None else unbroadcast(B, B.where(cond, 0.0, g), shape_b)
    return (ga, gb)


def _clamp_step(B, g, saved, ctx):
    (x,) = saved
    low, high = ctx
    inside = None
    if low is not None:
        inside = B.binary("ge", x, low)
    if high is not None:
        below = B.binary("le", x, high)
        inside = below if inside is None else B.binary("logical_and", inside, below)
    return (B.where(inside, g, 0.0),)


def _cast_step(B, g, saved, source):
    return (B.cast(g, source),)


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
                self._keep(a) if needs & A else None,
                self._keep(b) if needs & B_ else None,
                self._out(out, True) if needs & O else None,
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
        saved = (self._keep(a) if needs & A else None, b, self._out(out, True) if needs & O else None)
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
