"""Moment estimates shared by the optimizers: SGD's momentum (``Momentum`` in Burn),
exponential moving averages and Adam's bias-corrected moments (Burn's
``AdaptiveMomentum``). A previous value of ``None`` stands for zeros (the first step)."""

from __future__ import annotations

import dataclasses

from ember.tensor import Tensor
from ember.tensor.capture_hook import scalar_sqrt


def ema(previous: Tensor | None, value: Tensor, beta: float) -> Tensor:
    """``beta * previous + (1 - beta) * value`` (``(1 - beta) * value`` on the first step)."""
    fresh = value.mul_scalar(1.0 - beta)
    return fresh if previous is None else previous.mul_scalar(beta).add(fresh)


def velocity(previous: Tensor | None, grad: Tensor, momentum: float, dampening: float) -> Tensor:
    """SGD's momentum buffer: ``grad`` on the first step, then
    ``momentum * previous + (1 - dampening) * grad``."""
    if previous is None:
        return grad
    fresh = grad.mul_scalar(1.0 - dampening) if dampening else grad
    return previous.mul_scalar(momentum).add(fresh)


@dataclasses.dataclass(frozen=True, slots=True)
class AdaptiveMomentum:
    """Adam's moments: ``m = ema(m, g, beta_1)``, ``v = ema(v, g², beta_2)``, and the
    bias-corrected direction ``m̂ / (sqrt(v̂) + epsilon)`` (Adam, AdamW, LAMB; NAdam
    and RAdam share the moments)."""

    beta_1: float
    beta_2: float
    epsilon: float

    def moments(self, grad: Tensor, moment_1: Tensor | None, moment_2: Tensor | None) -> tuple[Tensor, Tensor]:
        """The new first and second moments."""
        return ema(moment_1, grad, self.beta_1), ema(moment_2, grad.mul(grad), self.beta_2)

    def direction(self, moment_1: Tensor, moment_2: Tensor, time: int, scale: float = 1.0) -> Tensor:
        """``scale * m̂ / (sqrt(v̂) + epsilon)`` at step ``time`` (from 1), with
        ``m̂ = m / (1 - beta_1^t)`` and ``v̂ = v / (1 - beta_2^t)``, computed as
        ``m / (sqrt(v) / sqrt(1 - beta_2^t) + epsilon) * (scale / (1 - beta_1^t))``
        (PyTorch's order, and the fused kernels')."""
        denom = moment_2.sqrt().div_scalar(scalar_sqrt(1.0 - self.beta_2**time)).add_scalar(self.epsilon)
        return moment_1.div(denom).mul_scalar(scale / (1.0 - self.beta_1**time))
