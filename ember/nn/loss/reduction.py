"""How a loss reduces per-element values."""

from __future__ import annotations

from enum import Enum

from ember.tensor import Tensor


class Reduction(Enum):
    """``MEAN``, ``SUM``, ``BATCH_MEAN`` (the sum divided by the size of dim 0) or
    ``AUTO``: the loss's default (mean for every ember loss but ``KLDivLoss``, where it
    is the batch mean, as the divergence's definition asks)."""

    MEAN = "mean"
    SUM = "sum"
    AUTO = "auto"
    BATCH_MEAN = "batch_mean"

    def apply(self, values: Tensor) -> Tensor:
        if self is Reduction.SUM:
            return values.sum()
        if self is Reduction.BATCH_MEAN:
            return values.sum().div_scalar(float(values.dims()[0] if values.rank else 1))
        return values.mean()
