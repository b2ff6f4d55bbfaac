"""LAMB: layer-wise adaptive moments (You et al., 2020, "Large Batch Optimization for
Deep Learning: Training BERT in 76 minutes", arXiv:1904.00962, Algorithm 2)."""

from __future__ import annotations

import dataclasses
import math

from ember.optim.base import OptimizerConfig, OptimizerState, check_betas, check_range
from ember.optim.momentum import AdaptiveMomentum
from ember.optim.weight_decay import l2_penalty
from ember.tensor import Tensor


@dataclasses.dataclass(slots=True)
class LambState(OptimizerState):
    """The moments and the steps taken."""

    moment_1: Tensor
    moment_2: Tensor
    time: int


class LambConfig(OptimizerConfig):
    """LAMB, with the paper's Algorithm 2 (bias-corrected moments) and ``phi`` the
    identity, as optax's ``lamb``:

    ``m, v`` as Adam; ``r = m̂ / (sqrt(v̂) + epsilon) + weight_decay * w``;
    ``w -= lr * ‖w‖ / ‖r‖ * r``, the trust ratio ``‖w‖ / ‖r‖`` taken as 1 where
    either norm is 0. The norms are per parameter tensor ("layer").

    >>> optim = LambConfig(weight_decay=0.01).init()
    """

    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-6
    weight_decay: float = 0.0

    state_type = LambState

    def validate(self) -> None:
        check_betas(self, "beta_1", "beta_2")
        check_range("LambConfig", "epsilon", self.epsilon, 0.0, math.inf, low_open=True, high_open=True)
        check_range("LambConfig", "weight_decay", self.weight_decay, 0.0, math.inf, high_open=True)

    def apply_single(self, lr: float, param: Tensor, grad: Tensor, state: LambState | None) -> tuple[Tensor, LambState]:
        adaptive = AdaptiveMomentum(self.beta_1, self.beta_2, self.epsilon)
        time = 1 if state is None else state.time + 1
        m, v = adaptive.moments(
            grad, None if state is None else state.moment_1, None if state is None else state.moment_2
        )
        update = l2_penalty(adaptive.direction(m, v, time), param, self.weight_decay)
        param_norm, update_norm = param.norm(), update.norm()
        degenerate = param_norm.equal_elem(0.0).bool_or(update_norm.equal_elem(0.0))
        # The ratio of a degenerate pair is never used: divide by 1 there instead of 0.
        trust = param_norm.div(update_norm.mask_fill(degenerate, 1.0)).mask_fill(degenerate, 1.0)
        return param.sub(update.mul(trust).mul_scalar(lr)), LambState(m, v, time)
