"""Huber loss: quadratic near zero, linear beyond ``delta``."""

from __future__ import annotations

from typing import Any

from ember.errors import ConfigError
from ember.module import Config, Module
from ember.nn.loss.reduction import Reduction
from ember.tensor import Tensor, autocast
from ember.tensor.loss import check_same_shape


class HuberLossConfig(Config):
    """Configuration of :class:`HuberLoss`.

    >>> HuberLossConfig(1.0).init()(Tensor.from_floats([0.5, 3.0]), Tensor.zeros([2])).into_scalar()
    1.3125
    """

    delta: float

    def validate(self) -> None:
        if self.delta <= 0:
            raise ConfigError(f"ember: HuberLossConfig: delta must be > 0, got {self.delta}")

    def init(self, device: Any = None) -> HuberLoss:
        return HuberLoss(self.delta)


class HuberLoss(Module):
    """``0.5 r^2`` where ``|r| <= delta``, else ``delta (|r| - 0.5 delta)``, with
    ``r = predictions - targets``."""

    delta: float = 1.0

    def forward(self, predictions: Tensor, targets: Tensor, reduction: Reduction = Reduction.AUTO) -> Tensor:
        return reduction.apply(self.forward_no_reduction(predictions, targets))

    def forward_no_reduction(self, predictions: Tensor, targets: Tensor) -> Tensor:
        check_same_shape("HuberLoss", predictions, targets)
        if autocast.ACTIVE:
            predictions, targets = autocast.cast_inputs("huber_loss", predictions, targets)
        return self.forward_residuals(predictions.float().sub(targets))

    def forward_residuals(self, residuals: Tensor) -> Tensor:
        """The loss of given residuals."""
        a = residuals.abs()
        quadratic = a.clamp_max(self.delta)
        # 0.5 q^2 + delta (|r| - q): both branches in one expression, finite gradients.
        return quadratic.mul(quadratic).mul_scalar(0.5).add(a.sub(quadratic).mul_scalar(self.delta))
