"""Adadelta (Zeiler, 2012, arXiv:1212.5701)."""

from __future__ import annotations

import dataclasses
import math

from ember.optim.base import OptimizerConfig, OptimizerState, check_range
from ember.optim.momentum import ema
from ember.optim.weight_decay import l2_penalty
from ember.tensor import Tensor


@dataclasses.dataclass(slots=True)
class AdadeltaState(OptimizerState):
    """The running averages of squared gradients and of squared updates."""

    square_avg: Tensor
    acc_delta: Tensor


class AdadeltaConfig(OptimizerConfig):
    """Adadelta, as ``torch.optim.Adadelta`` with its defaults (use ``lr=1.0`` for the
    paper's method, whose rate is set by the running averages alone):

    ``g += weight_decay * w``; ``s = rho * s + (1 - rho) * g²``;
    ``d = sqrt(a + epsilon) / sqrt(s + epsilon) * g``; ``a = rho * a + (1 - rho) * d²``;
    ``w -= lr * d``.

    >>> optim = AdadeltaConfig(rho=0.95).init()
    """

    rho: float = 0.9
    epsilon: float = 1e-6
    weight_decay: float = 0.0

    state_type = AdadeltaState

    def validate(self) -> None:
        check_range("AdadeltaConfig", "rho", self.rho, 0.0, 1.0)
        check_range("AdadeltaConfig", "epsilon", self.epsilon, 0.0, math.inf, low_open=True, high_open=True)
        check_range("AdadeltaConfig", "weight_decay", self.weight_decay, 0.0, math.inf, high_open=True)

    def apply_single(
        self, lr: float, param: Tensor, grad: Tensor, state: AdadeltaState | None
    ) -> tuple[Tensor, AdadeltaState]:
        grad = l2_penalty(grad, param, self.weight_decay)
        square_avg = ema(None if state is None else state.square_avg, grad.square(), self.rho)
        std = square_avg.add_scalar(self.epsilon).sqrt()
        if state is None:  # no updates yet: sqrt(0 + epsilon)
            delta = grad.mul_scalar(math.sqrt(self.epsilon)).div(std)
        else:
            delta = state.acc_delta.add_scalar(self.epsilon).sqrt().div(std).mul(grad)
        acc_delta = ema(None if state is None else state.acc_delta, delta.square(), self.rho)
        return param.sub(delta.mul_scalar(lr)), AdadeltaState(square_avg, acc_delta)
