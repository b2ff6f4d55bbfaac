"""AdaGrad (Duchi, Hazan & Singer), with learning-rate decay and weight decay."""

from __future__ import annotations

import dataclasses
import math

from ember.optim.base import OptimizerConfig, OptimizerState, SimpleOptimizer, check_range
from ember.optim.clipping import GradientClipping
from ember.tensor import Tensor


@dataclasses.dataclass
class AdaGradState(OptimizerState):
    """The running sum of squared gradients and the number of steps taken."""

    sum: Tensor
    time: int


class AdaGrad(SimpleOptimizer):
    """AdaGrad on one tensor, as ``torch.optim.Adagrad`` and Burn's ``AdaGrad``:

    ``g += weight_decay * w``; ``s += g²``; ``w -= lr / (1 + (t - 1) * lr_decay) * g / (sqrt(s) + epsilon)``.
    """

    state_type = AdaGradState

    def __init__(self, lr_decay: float, weight_decay: float, epsilon: float, initial_accumulator_value: float):
        self.lr_decay = lr_decay
        self.weight_decay = weight_decay
        self.epsilon = epsilon
        self.initial_accumulator_value = initial_accumulator_value

    def step(self, lr: float, tensor: Tensor, grad: Tensor, state: AdaGradState | None) -> tuple[Tensor, AdaGradState]:
        if self.weight_decay:
            grad = grad.add(tensor.mul_scalar(self.weight_decay))
        square = grad.square()
        if state is None:
            total = square.add_scalar(self.initial_accumulator_value) if self.initial_accumulator_value else square
            time = 1
        else:
            total = state.sum.add(square)
            time = state.time + 1
        decayed_lr = lr / (1.0 + (time - 1) * self.lr_decay)
        update = grad.div(total.sqrt().add_scalar(self.epsilon)).mul_scalar(decayed_lr)
        return tensor.sub(update), AdaGradState(total, time)


class AdaGradConfig(OptimizerConfig):
    """AdaGrad, with Burn's defaults (``epsilon=1e-5``; PyTorch uses 1e-10).
    ``initial_accumulator_value`` starts the sum of squares (PyTorch's option).

    >>> optim = AdaGradConfig(lr_decay=1e-3).init()
    """

    lr_decay: float = 0.0
    weight_decay: float = 0.0
    epsilon: float = 1e-5
    initial_accumulator_value: float = 0.0
    grad_clipping: GradientClipping | None = None

    def validate(self) -> None:
        check_range("AdaGradConfig", "lr_decay", self.lr_decay, 0.0, math.inf, high_open=True)
        check_range("AdaGradConfig", "weight_decay", self.weight_decay, 0.0, math.inf, high_open=True)
        check_range("AdaGradConfig", "epsilon", self.epsilon, 0.0, math.inf, low_open=True, high_open=True)
        check_range("AdaGradConfig", "initial_accumulator_value", self.initial_accumulator_value, 0.0, math.inf,
                    high_open=True)

    def build(self) -> AdaGrad:
        return AdaGrad(self.lr_decay, self.weight_decay, self.epsilon, self.initial_accumulator_value)
