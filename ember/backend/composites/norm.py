"""Layer normalisation over the last dim."""

from __future__ import annotations

from typing import Any

from ember.backend.composites.registry import composite
from ember.backend.ops import BinaryOp, ReduceOp, UnaryOp


@composite("layer_norm")
def layer_norm(ops: Any, x: Any, gamma: Any, beta: Any, epsilon: float) -> tuple[Any, Any, Any]:
    """``((x - mean) * rstd * gamma + beta, mean, rstd)`` with ``rstd = 1 / sqrt(var +
    epsilon)`` (biased variance) over the last dim; the statistics ``[..., 1]``."""
    last = len(x.shape) - 1
    mean = ops.reduce(ReduceOp.MEAN, x, last)
    centered = ops.binary(BinaryOp.SUB, x, mean)
    var = ops.reduce(ReduceOp.MEAN, ops.binary(BinaryOp.MUL, centered, centered), last)
    rstd = ops.unary(UnaryOp.RSQRT, ops.binary(BinaryOp.ADD, var, epsilon))
    out = ops.binary(BinaryOp.MUL, centered, rstd)
    if gamma is not None:
        out = ops.binary(BinaryOp.MUL, out, gamma)
    if beta is not None:
        out = ops.binary(BinaryOp.ADD, out, beta)
    return out, mean, rstd
