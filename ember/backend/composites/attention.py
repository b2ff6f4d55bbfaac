"""Scaled dot-product attention (operands already broadcast by the tensor layer)."""

from __future__ import annotations

import math
from typing import Any

from ember.backend.composites.layers import transpose
from ember.backend.composites.registry import composite, run, stop_gradient
from ember.backend.dtype import DType
from ember.backend.ops import BinaryOp, ReduceOp


def hidden_keys(ops: Any, rows: int, cols: int, mask: Any, causal: bool) -> Any:
    """The bool ``[..., L, S]`` of hidden keys: ``mask`` or, with ``causal``, the keys
    after each query (``None`` where nothing is hidden)."""
    if not causal:
        return mask
    r = ops.reshape(ops.arange(0, rows, 1, DType.INT64), (rows, 1))
    c = ops.reshape(ops.arange(0, cols, 1, DType.INT64), (1, cols))
    later = ops.binary(BinaryOp.GT, c, r)
    return later if mask is None else ops.binary(BinaryOp.LOGICAL_OR, mask, later)


@composite("attention")
def attention(
    ops: Any,
    query: Any,
    key: Any,
    value: Any,
    mask: Any,
    bias: Any,
    fill: float,
    scale: float,
    causal: bool,
    keep: Any,
) -> tuple[Any, Any]:
    """``(softmax(scale * q @ k^T + bias, hidden keys at fill) * keep @ v, weights)``;
    a row whose every key is hidden at ``-inf`` (or whose scores are all ``-inf``
    with a bias) gets zero weights."""
    scores = ops.binary(BinaryOp.MUL, ops.matmul(query, transpose(ops, key)), scale)
    if bias is not None:
        scores = ops.binary(BinaryOp.ADD, scores, bias)
    hidden = hidden_keys(ops, query.shape[-2], key.shape[-2], mask, causal)
    if hidden is not None:
        scores = ops.where(hidden, fill, scores)
    last = len(scores.shape) - 1
    weights = run(ops, "softmax", scores, last)
    if fill == -math.inf or bias is not None:
        peak = ops.reduce(ReduceOp.MAX, stop_gradient(ops, scores), last)
        weights = ops.where(ops.binary(BinaryOp.EQ, peak, -math.inf), 0.0, weights)
    dropped = weights if keep is None else ops.binary(BinaryOp.MUL, weights, keep)
    return ops.matmul(dropped, value), weights
