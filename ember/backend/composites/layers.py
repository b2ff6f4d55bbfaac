"""The linear layer and its backward."""

from __future__ import annotations

from typing import Any

from ember.backend.composites.registry import composite
from ember.backend.ops import BinaryOp, ReduceOp


def transpose(ops: Any, x: Any) -> Any:
    """``x`` with its last two dims swapped."""
    rank = len(x.shape)
    return ops.permute(x, tuple(range(rank - 2)) + (rank - 1, rank - 2))


@composite("linear")
def linear(ops: Any, x: Any, weight: Any, bias: Any) -> Any:
    """``x @ weight + bias`` (``x`` of rank >= 2)."""
    out = ops.matmul(x, weight)
    return out if bias is None else ops.binary(BinaryOp.ADD, out, bias)


@composite("linear_backward")
def linear_backward(ops: Any, x: Any, weight: Any, grad: Any, need_x: bool, need_weight: bool, need_bias: bool):
    """``(grad @ weight^T, x^T @ grad, sum(grad))`` over the rows (``None`` where not needed)."""
    d_out = grad.shape[-1]
    gx = ops.matmul(grad, transpose(ops, weight)) if need_x else None
    g2 = grad if len(grad.shape) == 2 else ops.reshape(grad, (-1, d_out))
    gw = None
    if need_weight:
        x2 = x if len(x.shape) == 2 else ops.reshape(x, (-1, x.shape[-1]))
        gw = ops.matmul(transpose(ops, x2), g2)
    gb = ops.reshape(ops.reduce(ReduceOp.SUM, g2, 0), (d_out,)) if need_bias else None
    return gx, gw, gb
