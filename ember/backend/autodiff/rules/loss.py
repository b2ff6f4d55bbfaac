"""Fused losses: forward recording and backward steps side by side."""

from __future__ import annotations

from ember.backend.autodiff.graph import AutodiffTensor
from ember.backend.autodiff.rules.common import RecordMixin
from ember.backend.composites import run
from ember.backend.ops import BinaryOp, UnaryOp


def _mse_step(ops, g, saved, ctx):
    pred, target = saved
    mean, track_pred, track_target = ctx
    diff = ops.binary(BinaryOp.SUB, pred, target)
    n = 1
    for d in diff.shape:
        n *= d
    if not diff.shape:  # the [1]-shaped seed of a 0-d input's loss: its gradient stays 0-d
        g = ops.reshape(g, ())
    scale = ops.binary(BinaryOp.MUL, g, 2.0 / n if mean else 2.0)
    grad = ops.binary(BinaryOp.MUL, diff, scale)
    return (grad if track_pred else None, ops.unary(UnaryOp.NEG, grad) if track_target else None)


def _cross_entropy_step(ops, g, saved, ctx):
    log_probs, targets = saved
    return (run(ops, "cross_entropy_backward", log_probs, targets, g),)


class LossRules(RecordMixin):
    """Recording of fused losses (compute-bound: inputs kept)."""

    def mse_loss(self, pred: AutodiffTensor, target: AutodiffTensor, mean: bool):
        out = self.inner.mse_loss(pred.inner, target.inner, mean)
        if out is NotImplemented:
            return NotImplemented
        np_, nt = pred.node, target.node
        if np_ is None and nt is None:
            return AutodiffTensor(out, None)
        saved = (self._keep(pred), self._keep(target))
        return self._record(out, (np_, nt), _mse_step, saved, (mean, np_ is not None, nt is not None))

    def cross_entropy(self, logits: AutodiffTensor, targets: AutodiffTensor):
        result = self.inner.cross_entropy(logits.inner, targets.inner)
        if result is NotImplemented:
            return NotImplemented
        losses, log_probs = result
        if logits.node is None:
            return AutodiffTensor(losses, None), AutodiffTensor(log_probs, None)
        node = self._record(losses, (logits.node,), _cross_entropy_step, (log_probs, targets.inner), None)
        return node, AutodiffTensor(log_probs, None)
