"""Fused losses: forward recording and backward steps side by side."""

from __future__ import annotations

from ember.backend.autodiff.graph import AutodiffTensor
from ember.backend.autodiff.rules.common import RecordMixin
from ember.backend.ops import BinaryOp, UnaryOp


def _mse_step(ops, g, saved, ctx):
    pred, target = saved
    mean, track_pred, track_target = ctx
    diff = ops.binary(BinaryOp.SUB, pred, target)
    n = 1
    for d in diff.shape:
        n *= d
    scale = ops.binary(BinaryOp.MUL, g, 2.0 / n if mean else 2.0)
    grad = ops.binary(BinaryOp.MUL, diff, scale)
    return (grad if track_pred else None, ops.unary(UnaryOp.NEG, grad) if track_target else None)


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
