"""How a loss reduces per-element values."""

from __future__ import annotations

from enum import Enum

from ember.tensor import Tensor


class Reduction(Enum):
    """``MEAN`` (``AUTO`` is the loss's default, mean for every ember loss) or ``SUM``."""

    MEAN = "mean"
    SUM = "sum"
    AUTO = "auto"

    def apply(self, values: Tensor) -> Tensor:
        return values.sum() if self is Reduction.SUM else values.mean()
