"""Adan: adaptive Nesterov momentum (Xie et al., 2022, arXiv:2208.06677)."""

from __future__ import annotations

import dataclasses
import math

from ember.backend.fusion.scalars import scalar_sqrt
from ember.optim.base import OptimizerConfig, OptimizerState, SimpleOptimizer, check_range
from ember.optim.clipping import GradientClipping
from ember.tensor import Tensor


@dataclasses.dataclass
class AdanState(OptimizerState):
    """First moment, gradient-difference moment, second moment of ``g + beta_2 * (g - g_prev)``,
    the previous gradient and the number of steps taken."""

    exp_avg: Tensor
    exp_avg_diff: Tensor
    exp_avg_sq: Tensor
    previous_grad: Tensor
    time: int


class Adan(SimpleOptimizer):
    """Adan on one tensor, as the authors' PyTorch implementation and Burn's ``Adan``
    (betas weigh the old value: ``m = beta_1 * m + (1 - beta_1) * g``).

    With ``d = g - g_prev`` (0 on the first step): ``m = b1 m + (1-b1) g``,
    ``v = b2 v + (1-b2) d``, ``n = b3 n + (1-b3) (g + b2 d)²``;
    ``u = (m / (1-b1^t) + b2 v / (1-b2^t)) / (sqrt(n / (1-b3^t)) + epsilon)``;
    ``w = (w - lr u) / (1 + lr weight_decay)`` (proximal), or with ``no_prox``
    ``w = w (1 - lr weight_decay) - lr u``.
    """

    state_type = AdanState

    def __init__(self, beta_1: float, beta_2: float, beta_3: float, epsilon: float, weight_decay: float,
                 no_prox: bool):
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.beta_3 = beta_3
        self.epsilon = epsilon
        self.weight_decay = weight_decay
        self.no_prox = no_prox

    def step(self, lr: float, tensor: Tensor, grad: Tensor, state: AdanState | None) -> tuple[Tensor, AdanState]:
        b1, b2, b3 = self.beta_1, self.beta_2, self.beta_3
        if state is None:
            m = grad.mul_scalar(1.0 - b1)
            v = grad.zeros_like()
            n = grad.square().mul_scalar(1.0 - b3)
            time = 1
        else:
            diff = grad.sub(state.previous_grad)
            m = state.exp_avg.mul_scalar(b1).add(grad.mul_scalar(1.0 - b1))
            v = state.exp_avg_diff.mul_scalar(b2).add(diff.mul_scalar(1.0 - b2))
            n = state.exp_avg_sq.mul_scalar(b3).add(grad.add(diff.mul_scalar(b2)).square().mul_scalar(1.0 - b3))
            time = state.time + 1
        denom = n.sqrt().div_scalar(scalar_sqrt(1.0 - b3**time)).add_scalar(self.epsilon)
        numerator = m.div_scalar(1.0 - b1**time)
        if state is not None:
            numerator = numerator.add(v.mul_scalar(b2 / (1.0 - b2**time)))
        update = numerator.div(denom).mul_scalar(lr)
        decay = lr * self.weight_decay
        if self.no_prox:
            new = (tensor.mul_scalar(1.0 - decay) if decay else tensor).sub(update)
        else:
            new = tensor.sub(update)
            if decay:
                new = new.div_scalar(1.0 + decay)
        return new, AdanState(m, v, n, grad, time)


class AdanConfig(OptimizerConfig):
    """Adan, with Burn's (and the paper's code's) defaults.

    >>> optim = AdanConfig(weight_decay=0.02).init()
    """

    beta_1: float = 0.98
    beta_2: float = 0.92
    beta_3: float = 0.99
    epsilon: float = 1e-8
    weight_decay: float = 0.0
    no_prox: bool = False
    grad_clipping: GradientClipping | None = None

    def validate(self) -> None:
        for field in ("beta_1", "beta_2", "beta_3"):
            check_range("AdanConfig", field, getattr(self, field), 0.0, 1.0, high_open=True)
        check_range("AdanConfig", "epsilon", self.epsilon, 0.0, math.inf, low_open=True, high_open=True)
        check_range("AdanConfig", "weight_decay", self.weight_decay, 0.0, math.inf, high_open=True)

    def build(self) -> Adan:
        return Adan(self.beta_1, self.beta_2, self.beta_3, self.epsilon, self.weight_decay, self.no_prox)
