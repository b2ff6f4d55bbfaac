"""Mean squared error."""

from __future__ import annotations

from ember.module import Module
from ember.nn.loss.reduction import Reduction
from ember.tensor import Tensor
from ember.tensor.loss import mse_loss, squared_error


class MseLoss(Module):
    """``mean((logits - targets)^2)`` (or the sum)."""

    def forward(self, logits: Tensor, targets: Tensor, reduction: Reduction = Reduction.MEAN) -> Tensor:
        return mse_loss(logits, targets, mean=reduction is not Reduction.SUM)

    def forward_no_reduction(self, logits: Tensor, targets: Tensor) -> Tensor:
        return squared_error(logits, targets)
