"""Kullback-Leibler divergence of a predicted distribution from a target one."""

from __future__ import annotations

from typing import Any

from ember.module import Config, Module
from ember.nn.loss.reduction import Reduction
from ember.tensor import Tensor, autocast
from ember.tensor.loss import check_same_shape


class KLDivLossConfig(Config):
    """Configuration of :class:`KLDivLoss`: ``log_target`` says the targets are
    log-probabilities too.

    >>> import math
    >>> p = Tensor.from_floats([[0.5, 0.5]])
    >>> KLDivLossConfig().init()(p.log(), p).into_scalar()
    0.0
    """

    log_target: bool = False

    def init(self, device: Any = None) -> KLDivLoss:
        return KLDivLoss(self.log_target)


class KLDivLoss(Module):
    """``target * (log(target) - predictions)`` per element, where ``predictions``
    are log-probabilities (0 where the target is 0, as PyTorch). ``AUTO`` reduces by
    the batch mean (the divergence per sample); ``MEAN`` averages every element."""

    log_target: bool = False

    def forward(self, predictions: Tensor, targets: Tensor, reduction: Reduction = Reduction.AUTO) -> Tensor:
        if reduction is Reduction.AUTO:
            reduction = Reduction.BATCH_MEAN
        return reduction.apply(self.forward_no_reduction(predictions, targets))

    def forward_no_reduction(self, predictions: Tensor, targets: Tensor) -> Tensor:
        check_same_shape("KLDivLoss", predictions, targets)
        if autocast.ACTIVE:
            predictions, targets = autocast.cast_inputs("kl_div", predictions, targets)
        log_q = predictions.float()
        t = targets.cast(log_q.dtype)
        if self.log_target:
            return t.exp().mul(t.sub(log_q))
        positive = t.greater_elem(0.0)
        safe = t.mask_fill(positive.bool_not(), 1.0)
        return t.mul(safe.log().sub(log_q)).mask_fill(positive.bool_not(), 0.0)
