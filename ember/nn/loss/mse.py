"""Mean squared error."""

from __future__ import annotations

from ember.errors import ShapeError
from ember.module import Module
from ember.nn.loss.reduction import Reduction
from ember.tensor import Tensor


def check_same_shape(name: str, logits: Tensor, targets: Tensor) -> None:
    if logits.dims() != targets.dims():
        raise ShapeError(
            f"ember: {name}: predictions {logits.dims()} and targets {targets.dims()} must have one shape; "
            "reshape the targets (e.g. .unsqueeze_dim(-1)) to match"
        )


class MseLoss(Module):
    """``mean((logits - targets)^2)`` (or the sum)."""

    def forward(self, logits: Tensor, targets: Tensor, reduction: Reduction = Reduction.MEAN) -> Tensor:
        return reduction.apply(self.forward_no_reduction(logits, targets))

    def forward_no_reduction(self, logits: Tensor, targets: Tensor) -> Tensor:
        check_same_shape("MseLoss", logits, targets)
        diff = logits.sub(targets)
        return diff.mul(diff)
