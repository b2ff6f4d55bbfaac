"""Stochastic gradient descent, with optional momentum, Nesterov and weight decay."""

from __future__ import annotations

import dataclasses
import math

from ember.errors import ConfigError
from ember.optim.base import OptimizerConfig, OptimizerState, check_range
from ember.optim.momentum import velocity
from ember.optim.weight_decay import l2_penalty
from ember.tensor import Tensor


@dataclasses.dataclass(slots=True)
class SgdState(OptimizerState):
    """The velocity (``None`` without momentum)."""

    momentum: Tensor | None = None


class SgdConfig(OptimizerConfig):
    """SGD, as ``torch.optim.SGD`` and Burn's ``Sgd`` (Burn's momentum and weight-decay
    sub-configs flattened: ``momentum=0`` means no momentum; ``dampening`` defaults to
    0 as in PyTorch, Burn's ``MomentumConfig`` uses 0.1):

    ``g += weight_decay * w``; with momentum ``v = g`` on the first step, then
    ``v = momentum * v + (1 - dampening) * g``; the step is ``v`` (or
    ``g + momentum * v`` with Nesterov); ``w -= lr * step``.

    >>> optim = SgdConfig(momentum=0.9, nesterov=True).init()
    >>> model = optim.step(1e-2, model, grads)  # doctest: +SKIP
    """

    momentum: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0

    state_type = SgdState

    def validate(self) -> None:
        check_range("SgdConfig", "momentum", self.momentum, 0.0, 1.0, high_open=True)
        check_range("SgdConfig", "dampening", self.dampening, 0.0, 1.0)
        check_range("SgdConfig", "weight_decay", self.weight_decay, 0.0, math.inf, high_open=True)
        if self.nesterov and self.momentum == 0.0:
            raise ConfigError(
                "ember: SgdConfig: nesterov=True needs a momentum in (0, 1), got momentum=0.0; "
                "set momentum (e.g. SgdConfig(momentum=0.9, nesterov=True)) or drop nesterov"
            )

    def apply_single(self, lr: float, param: Tensor, grad: Tensor, state: SgdState | None) -> tuple[Tensor, SgdState]:
        grad = l2_penalty(grad, param, self.weight_decay)
        buffer = None
        if self.momentum:
            buffer = velocity(None if state is None else state.momentum, grad, self.momentum, self.dampening)
            grad = grad.add(buffer.mul_scalar(self.momentum)) if self.nesterov else buffer
        return param.sub(grad.mul_scalar(lr)), SgdState(buffer)
