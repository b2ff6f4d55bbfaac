"""Distributions for :meth:`ember.Tensor.random`."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ember.errors import ValueRangeError


@dataclass(frozen=True)
class Distribution:
    """A distribution to sample tensor values from.

    Build one with ``Distribution.default()`` (uniform on [0, 1)),
    ``Distribution.uniform(lo, hi)``, ``Distribution.normal(mean, std)`` or
    ``Distribution.bernoulli(p)``.
    """

    kind: str
    a: float = 0.0
    b: float = 1.0

    @staticmethod
    def default() -> Distribution:
        return Distribution("uniform", 0.0, 1.0)

    @staticmethod
    def uniform(low: float, high: float) -> Distribution:
        low, high = float(low), float(high)
        if not (math.isfinite(low) and math.isfinite(high)) or low > high:
            raise ValueRangeError(f"ember: Distribution.uniform({low}, {high}): need finite bounds with low <= high")
        return Distribution("uniform", low, high)

    @staticmethod
    def normal(mean: float, std: float) -> Distribution:
        mean, std = float(mean), float(std)
        if not (math.isfinite(mean) and math.isfinite(std)) or std < 0:
            raise ValueRangeError(f"ember: Distribution.normal({mean}, {std}): need a finite mean and std >= 0")
        return Distribution("normal", mean, std)

    @staticmethod
    def bernoulli(p: float) -> Distribution:
        p = float(p)
        if not 0.0 <= p <= 1.0:
            raise ValueRangeError(f"ember: Distribution.bernoulli({p}): p must lie in [0, 1]")
        return Distribution("bernoulli", p, 0.0)

    def __repr__(self) -> str:
        if self.kind == "uniform":
            return f"Distribution.uniform({self.a}, {self.b})"
        if self.kind == "normal":
            return f"Distribution.normal({self.a}, {self.b})"
        return f"Distribution.bernoulli({self.a})"
