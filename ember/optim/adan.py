"""Adan: adaptive Nesterov momentum (Xie et al., 2022, arXiv:2208.06677)."""

from __future__ import annotations

import dataclasses
import math

from ember.optim.base import OptimizerConfig, OptimizerState, check_betas, check_range
from ember.optim.momentum import ema
from ember.optim.weight_decay import decoupled_decay
from ember.tensor import Tensor
from ember.tensor.capture_hook import scalar_sqrt


@dataclasses.dataclass(slots=True)
class AdanState(OptimizerState):
    """First moment, gradient-difference moment, second moment of ``g + beta_2 * (g - g_prev)``,
    the previous gradient and the number of steps taken."""

    exp_avg: Tensor
    exp_avg_diff: Tensor
    exp_avg_sq: Tensor
    previous_grad: Tensor
    time: int


class AdanConfig(OptimizerConfig):
    """Adan, as the authors' PyTorch implementation and Burn's ``Adan``, with their
    defaults (betas weigh the old value: ``m = beta_1 * m + (1 - beta_1) * g``).

    With ``d = g - g_prev`` (0 on the first step): ``m = b1 m + (1-b1) g``,
    ``v = b2 v + (1-b2) d``, ``n = b3 n + (1-b3) (g + b2 d)²``;
    ``u = (m / (1-b1^t) + b2 v / (1-b2^t)) / (sqrt(n / (1-b3^t)) + epsilon)``;
    ``w = (w - lr u) / (1 + lr weight_decay)`` (proximal), or with ``no_prox``
    ``w = w (1 - lr weight_decay) - lr u``.

    >>> optim = AdanConfig(weight_decay=0.02).init()
    """

    beta_1: float = 0.98
    beta_2: float = 0.92
    beta_3: float = 0.99
    epsilon: float = 1e-8
    weight_decay: float = 0.0
    no_prox: bool = False

    state_type = AdanState

    def validate(self) -> None:
        check_betas(self, "beta_1", "beta_2", "beta_3")
        check_range("AdanConfig", "epsilon", self.epsilon, 0.0, math.inf, low_open=True, high_open=True)
        check_range("AdanConfig", "weight_decay", self.weight_decay, 0.0, math.inf, high_open=True)

    def apply_single(self, lr: float, param: Tensor, grad: Tensor, state: AdanState | None) -> tuple[Tensor, AdanState]:
        b1, b2, b3 = self.beta_1, self.beta_2, self.beta_3
        if state is None:
            m = ema(None, grad, b1)
            v = grad.zeros_like()
            n = ema(None, grad.square(), b3)
            time = 1
        else:
            diff = grad.sub(state.previous_grad)
            m = ema(state.exp_avg, grad, b1)
            v = ema(state.exp_avg_diff, diff, b2)
            n = ema(state.exp_avg_sq, grad.add(diff.mul_scalar(b2)).square(), b3)
            time = state.time + 1
        denom = n.sqrt().div_scalar(scalar_sqrt(1.0 - b3**time)).add_scalar(self.epsilon)
        numerator = m.div_scalar(1.0 - b1**time)
        if state is not None:
            numerator = numerator.add(v.mul_scalar(b2 / (1.0 - b2**time)))
        update = numerator.div(denom).mul_scalar(lr)
        if self.no_prox:
            new = decoupled_decay(param, lr, self.weight_decay).sub(update)
        else:
            new = param.sub(update)
            if self.weight_decay:
                new = new.div_scalar(1.0 + lr * self.weight_decay)
        return new, AdanState(m, v, n, grad, time)
