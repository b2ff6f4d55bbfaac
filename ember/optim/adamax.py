"""Adamax: Adam with the infinity norm (Kingma & Ba, 2015, section 7.1)."""

from __future__ import annotations

import dataclasses
import math

from ember.optim.base import OptimizerConfig, OptimizerState, check_betas, check_range
from ember.optim.momentum import ema
from ember.optim.weight_decay import l2_penalty
from ember.tensor import Tensor


@dataclasses.dataclass(slots=True)
class AdamaxState(OptimizerState):
    """The first moment, the exponentially weighted infinity norm and the steps taken."""

    exp_avg: Tensor
    exp_inf: Tensor
    time: int


class AdamaxConfig(OptimizerConfig):
    """Adamax, as ``torch.optim.Adamax`` with its defaults:

    ``g += weight_decay * w``; ``m = beta_1 * m + (1 - beta_1) * g``;
    ``u = max(beta_2 * u, |g| + epsilon)``; ``w -= lr / (1 - beta_1^t) * m / u``.

    >>> optim = AdamaxConfig().init()
    """

    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-8
    weight_decay: float = 0.0

    state_type = AdamaxState

    def validate(self) -> None:
        check_betas(self, "beta_1", "beta_2")
        check_range("AdamaxConfig", "epsilon", self.epsilon, 0.0, math.inf, low_open=True, high_open=True)
        check_range("AdamaxConfig", "weight_decay", self.weight_decay, 0.0, math.inf, high_open=True)

    def apply_single(
        self, lr: float, param: Tensor, grad: Tensor, state: AdamaxState | None
    ) -> tuple[Tensor, AdamaxState]:
        grad = l2_penalty(grad, param, self.weight_decay)
        m = ema(None if state is None else state.exp_avg, grad, self.beta_1)
        fresh = grad.abs().add_scalar(self.epsilon)
        u = fresh if state is None else state.exp_inf.mul_scalar(self.beta_2).maximum(fresh)
        time = 1 if state is None else state.time + 1
        update = m.div(u).mul_scalar(lr / (1.0 - self.beta_1**time))
        return param.sub(update), AdamaxState(m, u, time)
