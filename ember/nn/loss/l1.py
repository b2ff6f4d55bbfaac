"""Mean absolute error."""

from __future__ import annotations

from ember.module import Module
from ember.nn.loss.reduction import Reduction
from ember.tensor import Tensor, autocast
from ember.tensor.loss import check_same_shape


class L1Loss(Module):
    """``mean(|predictions - targets|)`` (or the sum).

    >>> L1Loss()(Tensor.from_floats([1.0, -3.0]), Tensor.zeros([2])).into_scalar()
    2.0
    """

    def forward(self, predictions: Tensor, targets: Tensor, reduction: Reduction = Reduction.AUTO) -> Tensor:
        return reduction.apply(self.forward_no_reduction(predictions, targets))

    def forward_no_reduction(self, predictions: Tensor, targets: Tensor) -> Tensor:
        check_same_shape("L1Loss", predictions, targets)
        if autocast.ACTIVE:
            predictions, targets = autocast.cast_inputs("l1_loss", predictions, targets)
        return predictions.float().sub(targets).abs()
