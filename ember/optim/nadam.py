"""NAdam: Adam with Nesterov momentum (Dozat, 2016), with the momentum schedule of
``torch.optim.NAdam``."""

from __future__ import annotations

import dataclasses
import math

from ember.optim.base import OptimizerConfig, OptimizerState, check_betas, check_range
from ember.optim.momentum import AdaptiveMomentum
from ember.optim.weight_decay import decoupled_decay, l2_penalty
from ember.tensor import Tensor


@dataclasses.dataclass(slots=True)
class NAdamState(OptimizerState):
    """The moments, the steps taken and the product of the momentum schedule so far."""

    exp_avg: Tensor
    exp_avg_sq: Tensor
    time: int
    mu_product: float


class NAdamConfig(OptimizerConfig):
    """NAdam, as ``torch.optim.NAdam`` with its defaults. With the momentum schedule
    ``mu_t = beta_1 (1 - 0.96^(t momentum_decay) / 2)`` and ``P_t = mu_1 ... mu_t``:
    ``m, v`` as Adam; ``d = sqrt(v / (1 - beta_2^t)) + epsilon``;
    ``w -= lr (1 - mu_t) / (1 - P_t) g / d + lr mu_{t+1} / (1 - P_t mu_{t+1}) m / d``.
    ``weight_decay`` is an L2 penalty, or with ``decoupled_weight_decay`` (NAdamW) a
    decay of the weights by ``1 - lr weight_decay``.

    >>> optim = NAdamConfig(weight_decay=0.01, decoupled_weight_decay=True).init()
    """

    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-8
    weight_decay: float = 0.0
    momentum_decay: float = 4e-3
    decoupled_weight_decay: bool = False

    state_type = NAdamState

    def validate(self) -> None:
        check_betas(self, "beta_1", "beta_2")
        check_range("NAdamConfig", "epsilon", self.epsilon, 0.0, math.inf, low_open=True, high_open=True)
        check_range("NAdamConfig", "weight_decay", self.weight_decay, 0.0, math.inf, high_open=True)
        check_range("NAdamConfig", "momentum_decay", self.momentum_decay, 0.0, math.inf, high_open=True)

    def apply_single(
        self, lr: float, param: Tensor, grad: Tensor, state: NAdamState | None
    ) -> tuple[Tensor, NAdamState]:
        if self.decoupled_weight_decay:
            param = decoupled_decay(param, lr, self.weight_decay)
        else:
            grad = l2_penalty(grad, param, self.weight_decay)
        time = 1 if state is None else state.time + 1
        mu = self._mu(time)
        mu_next = self._mu(time + 1)
        mu_product = (1.0 if state is None else state.mu_product) * mu
        m, v = AdaptiveMomentum(self.beta_1, self.beta_2, self.epsilon).moments(
            grad, None if state is None else state.exp_avg, None if state is None else state.exp_avg_sq
        )
        denom = v.div_scalar(1.0 - self.beta_2**time).sqrt().add_scalar(self.epsilon)
        param = param.sub(grad.div(denom).mul_scalar(lr * (1.0 - mu) / (1.0 - mu_product)))
        param = param.sub(m.div(denom).mul_scalar(lr * mu_next / (1.0 - mu_product * mu_next)))
        return param, NAdamState(m, v, time, mu_product)

    def _mu(self, time: int) -> float:
        return self.beta_1 * (1.0 - 0.5 * 0.96 ** (time * self.momentum_decay))
