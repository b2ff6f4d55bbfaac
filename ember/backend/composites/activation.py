"""Activations: ``relu`` (and its backward), ``sigmoid``, ``gelu`` (and its backward), ``softmax``,
``log_softmax``. Each stays finite where its result is (no ``exp`` of a large positive
argument), as the backends' kernels."""

from __future__ import annotations

import math
from typing import Any

from ember.backend.composites.registry import composite, stop_gradient
from ember.backend.ops import BinaryOp, ReduceOp, UnaryOp

_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@composite("relu")
def relu(ops: Any, x: Any) -> Any:
    """``0`` where ``x <= 0``, else ``x`` (NaN stays NaN; no gradient at 0, as PyTorch)."""
    return ops.where(ops.binary(BinaryOp.LE, x, 0.0), 0.0, x)


@composite("relu_backward")
def relu_backward(ops: Any, out: Any, grad: Any) -> Any:
    """``grad`` where ``out > 0`` (``out = relu(x)``), else ``0``: no gradient at 0, as
    PyTorch (nor through a NaN, where PyTorch passes the gradient)."""
    return ops.where(ops.binary(BinaryOp.GT, out, 0.0), grad, 0.0)


@composite("sigmoid")
def sigmoid(ops: Any, x: Any) -> Any:
    """``(tanh(x / 2) + 1) / 2``: finite everywhere (``1 / (1 + exp(-x))`` overflows)."""
    half = ops.binary(BinaryOp.MUL, x, 0.5)
    return ops.binary(BinaryOp.MUL, ops.binary(BinaryOp.ADD, ops.unary(UnaryOp.TANH, half), 1.0), 0.5)


@composite("gelu")
def gelu(ops: Any, x: Any) -> Any:
    """The exact GELU: ``x * (erf(x / sqrt(2)) + 1) / 2``."""
    cdf = ops.binary(BinaryOp.ADD, ops.unary(UnaryOp.ERF, ops.binary(BinaryOp.MUL, x, _SQRT_HALF)), 1.0)
    return ops.binary(BinaryOp.MUL, ops.binary(BinaryOp.MUL, x, cdf), 0.5)


@composite("gelu_backward")
def gelu_backward(ops: Any, x: Any, grad: Any) -> Any:
    """``grad * (Phi(x) + x * phi(x))``."""
    phi = ops.binary(
        BinaryOp.MUL,
        ops.binary(BinaryOp.ADD, ops.unary(UnaryOp.ERF, ops.binary(BinaryOp.MUL, x, _SQRT_HALF)), 1.0),
        0.5,
    )
    pdf = ops.binary(
        BinaryOp.MUL,
        ops.unary(UnaryOp.EXP, ops.binary(BinaryOp.MUL, ops.binary(BinaryOp.MUL, x, x), -0.5)),
        _INV_SQRT_2PI,
    )
    return ops.binary(BinaryOp.MUL, grad, ops.binary(BinaryOp.ADD, phi, ops.binary(BinaryOp.MUL, x, pdf)))


def _shifted(ops: Any, x: Any, dim: int) -> Any:
    """``x - max(x)`` along ``dim``; the maximum passes no gradient (the result does
    not depend on it)."""
    return ops.binary(BinaryOp.SUB, x, stop_gradient(ops, ops.reduce(ReduceOp.MAX, x, dim)))


@composite("softmax")
def softmax(ops: Any, x: Any, dim: int) -> Any:
    """``e / sum(e)`` with ``e = exp(x - max(x))`` along ``dim``."""
    e = ops.unary(UnaryOp.EXP, _shifted(ops, x, dim))
    return ops.binary(BinaryOp.DIV, e, ops.reduce(ReduceOp.SUM, e, dim))


def softmax_backward(ops: Any, probs: Any, grad: Any, dim: int) -> Any:
    """The gradient of :func:`softmax` for its input, from its output ``probs``:
    ``probs * (grad - sum(grad * probs))`` along ``dim`` (autodiff's softmax and
    attention rules)."""
    dot = ops.reduce(ReduceOp.SUM, ops.binary(BinaryOp.MUL, grad, probs), dim)
    return ops.binary(BinaryOp.MUL, probs, ops.binary(BinaryOp.SUB, grad, dot))


@composite("log_softmax")
def log_softmax(ops: Any, x: Any, dim: int) -> Any:
    """``s - log(sum(exp(s)))`` with ``s = x - max(x)`` along ``dim``."""
    shifted = _shifted(ops, x, dim)
    total = ops.reduce(ReduceOp.SUM, ops.unary(UnaryOp.EXP, shifted), dim)
    return ops.binary(BinaryOp.SUB, shifted, ops.unary(UnaryOp.LOG, total))
