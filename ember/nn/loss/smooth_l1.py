"""Smooth L1 loss: quadratic below ``beta``, L1 beyond."""

from __future__ import annotations

from typing import Any

from ember.errors import ConfigError
from ember.module import Config, Module
from ember.nn.loss.reduction import Reduction
from ember.tensor import Tensor, autocast
from ember.tensor.loss import check_same_shape


class SmoothL1LossConfig(Config):
    """Configuration of :class:`SmoothL1Loss`.

    >>> SmoothL1LossConfig().init()(Tensor.from_floats([0.5, 3.0]), Tensor.zeros([2])).into_scalar()
    1.3125
    """

    beta: float = 1.0

    def validate(self) -> None:
        if self.beta < 0:
            raise ConfigError(f"ember: SmoothL1LossConfig: beta must be >= 0, got {self.beta}")

    def init(self, device: Any = None) -> SmoothL1Loss:
        return SmoothL1Loss(self.beta)


class SmoothL1Loss(Module):
    """``0.5 r^2 / beta`` where ``|r| < beta``, else ``|r| - 0.5 beta`` (plain L1 when
    ``beta`` is 0); equals ``HuberLoss(beta) / beta``."""

    beta: float = 1.0

    def forward(self, predictions: Tensor, targets: Tensor, reduction: Reduction = Reduction.AUTO) -> Tensor:
        return reduction.apply(self.forward_no_reduction(predictions, targets))

    def forward_no_reduction(self, predictions: Tensor, targets: Tensor) -> Tensor:
        check_same_shape("SmoothL1Loss", predictions, targets)
        if autocast.ACTIVE:
            predictions, targets = autocast.cast_inputs("smooth_l1_loss", predictions, targets)
        a = predictions.float().sub(targets).abs()
        if self.beta == 0:
            return a
        quadratic = a.clamp_max(self.beta)
        return quadratic.mul(quadratic).mul_scalar(0.5 / self.beta).add(a.sub(quadratic))
