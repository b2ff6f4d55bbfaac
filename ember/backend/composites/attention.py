"""Scaled dot-product attention (operands already broadcast by the tensor layer),
forward and backward: the one definition of their math (flex's numpy kernels and the
LLVM lowering's library steps compute the same, to float rounding)."""

from __future__ import annotations

import math
from typing import Any

from ember.backend.composites.activation import softmax_backward
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


def scores_grad(ops: Any, g_probs: Any, probs: Any, hidden: Any) -> Any:
    """The gradient of the scores from that of the weights: the softmax's backward,
    zero at hidden keys."""
    ds = softmax_backward(ops, probs, g_probs, len(probs.shape) - 1)
    return ds if hidden is None else ops.where(hidden, 0.0, ds)


@composite("attention_backward")
def attention_backward(
    ops: Any,
    query: Any,
    key: Any,
    value: Any,
    probs: Any,
    mask: Any,
    keep: Any,
    grad: Any,
    scale: float,
    causal: bool,
    need_query: bool,
    need_key: bool,
    need_value: bool,
    need_scores: bool,
) -> tuple[Any, Any, Any, Any]:
    """The gradients of :func:`attention`'s context ``(dQ, dK, dV, dS)`` (``None`` where
    not needed) from its gradient ``grad``, with ``P`` the weights and ``D = P * keep``:
    ``dV = D^T G``; ``dP = (G V^T) * keep``; ``dS = P * (dP - sum(dP * P))``, zero at
    hidden keys; ``dQ = (dS K) * scale``, ``dK = (dS^T Q) * scale``."""
    dropped = probs if keep is None else ops.binary(BinaryOp.MUL, probs, keep)
    g_value = ops.matmul(transpose(ops, dropped), grad) if need_value else None
    g_query = g_key = g_scores = None
    if need_query or need_key or need_scores:
        g_probs = ops.matmul(grad, transpose(ops, value))
        if keep is not None:
            g_probs = ops.binary(BinaryOp.MUL, g_probs, keep)
        hidden = hidden_keys(ops, probs.shape[-2], probs.shape[-1], mask, causal)
        ds = scores_grad(ops, g_probs, probs, hidden)
        if need_query:
            g_query = ops.binary(BinaryOp.MUL, ops.matmul(ds, key), scale)
        if need_key:
            g_key = ops.binary(BinaryOp.MUL, ops.matmul(transpose(ops, ds), query), scale)
        g_scores = ds if need_scores else None
    return g_query, g_key, g_value, g_scores
