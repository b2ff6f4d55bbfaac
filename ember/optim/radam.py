"""RAdam: Adam with a rectified adaptive rate (Liu et al., 2020, arXiv:1908.03265)."""

from __future__ import annotations

import dataclasses
import math

from ember.optim.base import OptimizerConfig, OptimizerState, check_betas, check_range
from ember.optim.momentum import AdaptiveMomentum
from ember.optim.weight_decay import decoupled_decay, l2_penalty
from ember.tensor import Tensor
from ember.tensor.capture_hook import scalar_sqrt


@dataclasses.dataclass(slots=True)
class RAdamState(OptimizerState):
    """The moments and the steps taken."""

    exp_avg: Tensor
    exp_avg_sq: Tensor
    time: int


class RAdamConfig(OptimizerConfig):
    """RAdam, as ``torch.optim.RAdam`` with its defaults. With ``rho_inf = 2 / (1 - beta_2) - 1``
    and ``rho_t = rho_inf - 2 t beta_2^t / (1 - beta_2^t)``: while ``rho_t <= 5`` the
    step is momentum SGD on the bias-corrected ``m̂``; then it is Adam's
    ``m̂ sqrt(1 - beta_2^t) / (sqrt(v) + epsilon)`` scaled by the rectification
    ``sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t))``.
    ``weight_decay`` is an L2 penalty, or with ``decoupled_weight_decay`` a decay of the
    weights by ``1 - lr weight_decay``.

    >>> optim = RAdamConfig().init()
    """

    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-8
    weight_decay: float = 0.0
    decoupled_weight_decay: bool = False

    state_type = RAdamState

    def validate(self) -> None:
        check_betas(self, "beta_1", "beta_2")
        check_range("RAdamConfig", "epsilon", self.epsilon, 0.0, math.inf, low_open=True, high_open=True)
        check_range("RAdamConfig", "weight_decay", self.weight_decay, 0.0, math.inf, high_open=True)

    def apply_single(
        self, lr: float, param: Tensor, grad: Tensor, state: RAdamState | None
    ) -> tuple[Tensor, RAdamState]:
        if self.decoupled_weight_decay:
            param = decoupled_decay(param, lr, self.weight_decay)
        else:
            grad = l2_penalty(grad, param, self.weight_decay)
        b1, b2 = self.beta_1, self.beta_2
        time = 1 if state is None else state.time + 1
        m, v = AdaptiveMomentum(b1, b2, self.epsilon).moments(
            grad, None if state is None else state.exp_avg, None if state is None else state.exp_avg_sq
        )
        correction_1, correction_2 = 1.0 - b1**time, 1.0 - b2**time
        rho_inf = 2.0 / (1.0 - b2) - 1.0
        rho_t = rho_inf - 2.0 * time * b2**time / correction_2
        if rho_t > 5.0:
            rect = scalar_sqrt((rho_t - 4.0) * (rho_t - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t))
            update = m.div(v.sqrt().add_scalar(self.epsilon)).mul_scalar(
                lr * rect * scalar_sqrt(correction_2) / correction_1
            )
        else:
            update = m.mul_scalar(lr / correction_1)
        return param.sub(update), RAdamState(m, v, time)
