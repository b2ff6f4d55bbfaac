"""Losses: mean squared error, cross entropy (and its backward)."""

from __future__ import annotations

from typing import Any

from ember.backend.composites.registry import composite, run
from ember.backend.ops import BinaryOp, ReduceOp, UnaryOp


@composite("mse_loss")
def mse_loss(ops: Any, pred: Any, target: Any, mean: bool) -> Any:
    """``sum((pred - target)^2)`` (divided by the count when ``mean``), shape ``[1]``."""
    diff = ops.reshape(ops.binary(BinaryOp.SUB, pred, target), (-1,))
    total = ops.reduce(ReduceOp.MEAN if mean else ReduceOp.SUM, ops.binary(BinaryOp.MUL, diff, diff), 0)
    return ops.reshape(total, (1,))


@composite("cross_entropy")
def cross_entropy(ops: Any, logits: Any, targets: Any) -> tuple[Any, Any]:
    """``(losses [N], log_probs [N, C])``: ``log_probs = log_softmax(logits)`` (the
    backend's kernel where it has one) and ``losses[i] = -log_probs[i, targets[i]]``."""
    n = logits.shape[0]
    log_probs = run(ops, "log_softmax", logits, 1)
    picked = ops.gather(log_probs, 1, ops.reshape(targets, (n, 1)))
    return ops.unary(UnaryOp.NEG, ops.reshape(picked, (n,))), log_probs


@composite("cross_entropy_backward")
def cross_entropy_backward(ops: Any, log_probs: Any, targets: Any, grad: Any) -> Any:
    """``(softmax - one_hot(targets)) * grad[:, None]``: ``exp(log_probs) * grad`` with
    ``grad`` taken off at the targets."""
    n = log_probs.shape[0]
    column = ops.reshape(grad, (n, 1))
    out = ops.binary(BinaryOp.MUL, ops.unary(UnaryOp.EXP, log_probs), column)
    return ops.scatter_add(out, 1, ops.reshape(targets, (n, 1)), ops.unary(UnaryOp.NEG, column))
