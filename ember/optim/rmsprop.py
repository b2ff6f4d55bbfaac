"""RMSProp (Tieleman & Hinton), optionally centered and with momentum."""

from __future__ import annotations

import dataclasses
import math

from ember.optim.base import OptimizerConfig, OptimizerState, check_range
from ember.optim.momentum import ema, velocity
from ember.optim.weight_decay import l2_penalty
from ember.tensor import Tensor


@dataclasses.dataclass(slots=True)
class RmsPropState(OptimizerState):
    """The running average of squared gradients; of gradients (centered only);
    the momentum buffer (momentum > 0 only)."""

    square_avg: Tensor
    grad_avg: Tensor | None = None
    momentum: Tensor | None = None


class RmsPropConfig(OptimizerConfig):
    """RMSProp, as ``torch.optim.RMSprop`` and Burn's ``RmsProp``, with Burn's defaults
    (``momentum=0.9``, ``epsilon=1e-5``; PyTorch uses 0 and 1e-8):

    ``g += weight_decay * w``; ``s = alpha * s + (1 - alpha) * g²``; centered:
    ``a = alpha * a + (1 - alpha) * g`` and ``s - a²`` replaces ``s`` below;
    ``d = g / (sqrt(s) + epsilon)``; with momentum ``b = momentum * b + d`` is the
    step instead of ``d``; ``w -= lr * step``.

    >>> optim = RmsPropConfig(alpha=0.9, centered=True).init()
    """

    alpha: float = 0.99
    momentum: float = 0.9
    epsilon: float = 1e-5
    centered: bool = False
    weight_decay: float = 0.0

    state_type = RmsPropState

    def validate(self) -> None:
        check_range("RmsPropConfig", "alpha", self.alpha, 0.0, 1.0)
        check_range("RmsPropConfig", "momentum", self.momentum, 0.0, 1.0, high_open=True)
        check_range("RmsPropConfig", "epsilon", self.epsilon, 0.0, math.inf, low_open=True, high_open=True)
        check_range("RmsPropConfig", "weight_decay", self.weight_decay, 0.0, math.inf, high_open=True)

    def apply_single(
        self, lr: float, param: Tensor, grad: Tensor, state: RmsPropState | None
    ) -> tuple[Tensor, RmsPropState]:
        grad = l2_penalty(grad, param, self.weight_decay)
        square_avg = ema(None if state is None else state.square_avg, grad.square(), self.alpha)
        variance = square_avg
        grad_avg = None
        if self.centered:
            grad_avg = ema(None if state is None else state.grad_avg, grad, self.alpha)
            variance = square_avg.sub(grad_avg.square())
        direction = grad.div(variance.sqrt().add_scalar(self.epsilon))
        buffer = None
        if self.momentum > 0.0:
            buffer = direction = velocity(None if state is None else state.momentum, direction, self.momentum, 0.0)
        return param.sub(direction.mul_scalar(lr)), RmsPropState(square_avg, grad_avg, buffer)
