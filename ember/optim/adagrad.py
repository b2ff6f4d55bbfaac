"""AdaGrad (Duchi, Hazan & Singer), with learning-rate decay and weight decay."""

from __future__ import annotations

import dataclasses
import math

from ember.optim.base import OptimizerConfig, OptimizerState, check_range
from ember.optim.weight_decay import l2_penalty
from ember.tensor import Tensor


@dataclasses.dataclass(slots=True)
class AdaGradState(OptimizerState):
    """The running sum of squared gradients and the number of steps taken."""

    sum: Tensor
    time: int


class AdaGradConfig(OptimizerConfig):
    """AdaGrad, as ``torch.optim.Adagrad`` and Burn's ``AdaGrad``, with Burn's defaults
    (``epsilon=1e-5``; PyTorch uses 1e-10). ``initial_accumulator_value`` starts the sum
    of squares (PyTorch's option):

    ``g += weight_decay * w``; ``s += g²``; ``w -= lr / (1 + (t - 1) * lr_decay) * g / (sqrt(s) + epsilon)``.

    >>> optim = AdaGradConfig(lr_decay=1e-3).init()
    """

    lr_decay: float = 0.0
    weight_decay: float = 0.0
    epsilon: float = 1e-5
    initial_accumulator_value: float = 0.0

    state_type = AdaGradState

    def validate(self) -> None:
        check_range("AdaGradConfig", "lr_decay", self.lr_decay, 0.0, math.inf, high_open=True)
        check_range("AdaGradConfig", "weight_decay", self.weight_decay, 0.0, math.inf, high_open=True)
        check_range("AdaGradConfig", "epsilon", self.epsilon, 0.0, math.inf, low_open=True, high_open=True)
        check_range(
            "AdaGradConfig", "initial_accumulator_value", self.initial_accumulator_value, 0.0, math.inf, high_open=True
        )

    def apply_single(
        self, lr: float, param: Tensor, grad: Tensor, state: AdaGradState | None
    ) -> tuple[Tensor, AdaGradState]:
        grad = l2_penalty(grad, param, self.weight_decay)
        square = grad.square()
        if state is None:
            total = square.add_scalar(self.initial_accumulator_value) if self.initial_accumulator_value else square
            time = 1
        else:
            total = state.sum.add(square)
            time = state.time + 1
        decayed_lr = lr / (1.0 + (time - 1) * self.lr_decay)
        update = grad.div(total.sqrt().add_scalar(self.epsilon)).mul_scalar(decayed_lr)
        return param.sub(update), AdaGradState(total, time)
