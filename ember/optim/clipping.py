"""Gradient clipping: by value, by norm per tensor (as Burn), or by the global norm
of all the gradients of a step (PyTorch's ``clip_grad_norm_``)."""

from __future__ import annotations

from ember.errors import ConfigError
from ember.module import Config
from ember.tensor import Tensor

_KINDS = ("value", "norm", "global_norm")


class GradientClipping(Config):
    """``GradientClipping.value(v)`` clamps each element to ``[-v, v]``;
    ``GradientClipping.norm(n)`` rescales each gradient tensor whose L2 norm exceeds
    ``n`` (Burn's ``ClipByNorm``); ``GradientClipping.global_norm(n)`` rescales all the
    gradients of a step (of a group, when a group has its own clipping) together when
    their joint L2 norm exceeds ``n`` (``torch.nn.utils.clip_grad_norm_``).

    >>> from ember.optim import AdamWConfig
    >>> optim = AdamWConfig(grad_clipping=GradientClipping.global_norm(1.0)).init()
    """

    kind: str
    threshold: float

    def validate(self) -> None:
        if self.kind not in _KINDS:
            raise ConfigError(
                f"ember: GradientClipping: kind must be one of {', '.join(map(repr, _KINDS))}, got {self.kind!r}"
            )
        if not self.threshold > 0:
            raise ConfigError(f"ember: GradientClipping: the threshold must be > 0, got {self.threshold}")

    @staticmethod
    def value(threshold: float) -> GradientClipping:
        return GradientClipping("value", float(threshold))

    @staticmethod
    def norm(threshold: float) -> GradientClipping:
        return GradientClipping("norm", float(threshold))

    @staticmethod
    def global_norm(max_norm: float) -> GradientClipping:
        return GradientClipping("global_norm", float(max_norm))

    def clip(self, grad: Tensor) -> Tensor:
        """One gradient clipped (a global norm over one tensor is its norm)."""
        if self.kind == "value":
            return grad.clamp(-self.threshold, self.threshold)
        return grad.mul(self._scale(grad.norm()))

    def clip_all(self, grads: list[Tensor]) -> list[Tensor]:
        """The gradients of one step clipped: each alone, or by their joint norm
        ``sqrt(sum of squares)``, staying on the device (no sync)."""
        if self.kind != "global_norm" or len(grads) < 2:
            return [self.clip(g) for g in grads]
        first = grads[0]
        total: Tensor | None = None
        for grad in grads:
            squares = grad.square().sum()
            if squares.device != first.device or squares.dtype != first.dtype:
                squares = squares.to_device(first.device).cast(first.dtype)
            total = squares if total is None else total.add(squares)
        assert total is not None  # at least two grads
        scale = self._scale(total.sqrt())
        return [
            g.mul(
                scale
                if g.device == scale.device and g.dtype == scale.dtype
                else scale.to_device(g.device).cast(g.dtype)
            )
            for g in grads
        ]

    def _scale(self, norm: Tensor) -> Tensor:
        """``min(1, threshold / (norm + 1e-6))``, as PyTorch's ``clip_grad_norm_``."""
        return norm.add_scalar(1e-6).recip().mul_scalar(self.threshold).clamp_max(1.0)
