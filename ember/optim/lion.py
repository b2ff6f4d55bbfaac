"""Lion: evolved sign momentum (Chen et al., 2023, "Symbolic Discovery of
Optimization Algorithms", arXiv:2302.06675, Algorithm 2)."""

from __future__ import annotations

import dataclasses
import math

from ember.optim.base import OptimizerConfig, OptimizerState, check_betas, check_range
from ember.optim.momentum import ema
from ember.optim.weight_decay import decoupled_decay
from ember.tensor import Tensor


@dataclasses.dataclass(slots=True)
class LionState(OptimizerState):
    """The momentum (an exponential average of gradients)."""

    exp_avg: Tensor


class LionConfig(OptimizerConfig):
    """Lion, with the paper's defaults (betas 0.9, 0.99; no weight decay). Its update
    has unit magnitude per element, so it wants a rate 3-10x below AdamW's and a
    weight decay 3-10x above:

    ``c = beta_1 * m + (1 - beta_1) * g``; ``w = w (1 - lr weight_decay) - lr sign(c)``;
    ``m = beta_2 * m + (1 - beta_2) * g`` (``m`` starts at 0).

    >>> optim = LionConfig(weight_decay=0.1).init()
    """

    beta_1: float = 0.9
    beta_2: float = 0.99
    weight_decay: float = 0.0

    state_type = LionState

    def validate(self) -> None:
        check_betas(self, "beta_1", "beta_2")
        check_range("LionConfig", "weight_decay", self.weight_decay, 0.0, math.inf, high_open=True)

    def apply_single(self, lr: float, param: Tensor, grad: Tensor, state: LionState | None) -> tuple[Tensor, LionState]:
        previous = None if state is None else state.exp_avg
        direction = ema(previous, grad, self.beta_1).sign()
        param = decoupled_decay(param, lr, self.weight_decay)
        return param.sub(direction.mul_scalar(lr)), LionState(ema(previous, grad, self.beta_2))
