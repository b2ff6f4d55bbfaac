"""RMSProp (Tieleman & Hinton), optionally centered and with momentum."""

from __future__ import annotations

import dataclasses
import math

from ember.optim.base import OptimizerConfig, OptimizerState, SimpleOptimizer, check_range
from ember.optim.clipping import GradientClipping
from ember.tensor import Tensor


@dataclasses.dataclass
class RmsPropState(OptimizerState):
    """The running average of squared gradients; of gradients (centered only);
    the momentum buffer (momentum > 0 only)."""

    square_avg: Tensor
    grad_avg: Tensor | None = None
    momentum: Tensor | None = None


class RmsProp(SimpleOptimizer):
    """RMSProp on one tensor, as ``torch.optim.RMSprop`` and Burn's ``RmsProp``:

    ``g += weight_decay * w``; ``s = alpha * s + (1 - alpha) * g²``; centered:
    ``a = alpha * a + (1 - alpha) * g`` and ``s - a²`` replaces ``s`` below;
    ``d = g / (sqrt(s) + epsilon)``; with momentum ``b = momentum * b + d`` is the
    step instead of ``d``; ``w -= lr * step``.
    """

    state_type = RmsPropState

    def __init__(self, alpha: float, momentum: float, epsilon: float, centered: bool, weight_decay: float):
        self.alpha = alpha
        self.momentum = momentum
        self.epsilon = epsilon
        self.centered = centered
        self.weight_decay = weight_decay

    def step(self, lr: float, tensor: Tensor, grad: Tensor, state: RmsPropState | None) -> tuple[Tensor, RmsPropState]:
        alpha = self.alpha
        if self.weight_decay:
            grad = grad.add(tensor.mul_scalar(self.weight_decay))
        fresh = grad.square().mul_scalar(1.0 - alpha)
        square_avg = fresh if state is None else state.square_avg.mul_scalar(alpha).add(fresh)
        variance = square_avg
        grad_avg = None
        if self.centered:
            fresh_avg = grad.mul_scalar(1.0 - alpha)
            previous = None if state is None else state.grad_avg
            grad_avg = fresh_avg if previous is None else previous.mul_scalar(alpha).add(fresh_avg)
            variance = square_avg.sub(grad_avg.square())
        direction = grad.div(variance.sqrt().add_scalar(self.epsilon))
        buffer = None
        if self.momentum > 0.0:
            previous = None if state is None else state.momentum
            buffer = direction if previous is None else previous.mul_scalar(self.momentum).add(direction)
            direction = buffer
        return tensor.sub(direction.mul_scalar(lr)), RmsPropState(square_avg, grad_avg, buffer)


class RmsPropConfig(OptimizerConfig):
    """RMSProp, with Burn's defaults (``momentum=0.9``, ``epsilon=1e-5``; PyTorch
    uses 0 and 1e-8).

    >>> optim = RmsPropConfig(alpha=0.9, centered=True).init()
    """

    alpha: float = 0.99
    momentum: float = 0.9
    epsilon: float = 1e-5
    centered: bool = False
    weight_decay: float = 0.0
    grad_clipping: GradientClipping | None = None

    def validate(self) -> None:
        check_range("RmsPropConfig", "alpha", self.alpha, 0.0, 1.0)
        check_range("RmsPropConfig", "momentum", self.momentum, 0.0, 1.0, high_open=True)
        check_range("RmsPropConfig", "epsilon", self.epsilon, 0.0, math.inf, low_open=True, high_open=True)
        check_range("RmsPropConfig", "weight_decay", self.weight_decay, 0.0, math.inf, high_open=True)

    def build(self) -> RmsProp:
        return RmsProp(self.alpha, self.momentum, self.epsilon, self.centered, self.weight_decay)
