"""Gradient clipping: by value or by norm (per parameter tensor, as Burn)."""

from __future__ import annotations

from ember.errors import ConfigError
from ember.module import Config
from ember.tensor import Tensor


class GradientClipping(Config):
    """``GradientClipping.value(v)`` clamps each element to ``[-v, v]``;
    ``GradientClipping.norm(n)`` rescales a gradient tensor whose L2 norm exceeds ``n``."""

    kind: str
    threshold: float

    def validate(self) -> None:
        if self.kind not in ("value", "norm"):
            raise ConfigError(f"ember: GradientClipping: kind must be 'value' or 'norm', got {self.kind!r}")
        if not self.threshold > 0:
            raise ConfigError(f"ember: GradientClipping: the threshold must be > 0, got {self.threshold}")

    @staticmethod
    def value(threshold: float) -> GradientClipping:
        return GradientClipping("value", float(threshold))

    @staticmethod
    def norm(threshold: float) -> GradientClipping:
        return GradientClipping("norm", float(threshold))

    def clip(self, grad: Tensor) -> Tensor:
        if self.kind == "value":
            return grad.clamp(-self.threshold, self.threshold)
        norm = grad.norm()
        scale = norm.add_scalar(1e-6).recip().mul_scalar(self.threshold).clamp_max(1.0)
        return grad.mul(scale)
