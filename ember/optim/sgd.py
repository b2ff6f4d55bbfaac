"""Stochastic gradient descent, with optional momentum, Nesterov and weight decay."""

from __future__ import annotations

import dataclasses
import math

from ember.errors import ConfigError
from ember.optim.base import OptimizerConfig, OptimizerState, SimpleOptimizer, check_range
from ember.optim.clipping import GradientClipping
from ember.tensor import Tensor


@dataclasses.dataclass
class SgdState(OptimizerState):
    """The velocity (``None`` without momentum)."""

    momentum: Tensor | None = None


class Sgd(SimpleOptimizer):
    """SGD on one tensor, as ``torch.optim.SGD`` and Burn's ``Sgd``:

    ``g += weight_decay * w``; with momentum ``v = g`` on the first step, then
    ``v = momentum * v + (1 - dampening) * g``; the step is ``v`` (or
    ``g + momentum * v`` with Nesterov); ``w -= lr * step``.
    """

    state_type = SgdState

    def __init__(self, momentum: float, dampening: float, nesterov: bool, weight_decay: float):
        self.momentum = momentum
        self.dampening = dampening
        self.nesterov = nesterov
        self.weight_decay = weight_decay

    def step(self, lr: float, tensor: Tensor, grad: Tensor, state: SgdState | None) -> tuple[Tensor, SgdState]:
        if self.weight_decay:
            grad = grad.add(tensor.mul_scalar(self.weight_decay))
        velocity = None
        if self.momentum:
            previous = None if state is None else state.momentum
            if previous is None:
                velocity = grad
            else:
                fresh = grad.mul_scalar(1.0 - self.dampening) if self.dampening else grad
                velocity = previous.mul_scalar(self.momentum).add(fresh)
            grad = grad.add(velocity.mul_scalar(self.momentum)) if self.nesterov else velocity
        return tensor.sub(grad.mul_scalar(lr)), SgdState(velocity)


class SgdConfig(OptimizerConfig):
    """SGD. Burn's ``SgdConfig`` with its momentum and weight-decay sub-configs
    flattened: ``momentum=0`` means no momentum (Burn's ``None``), ``dampening``
    defaults to 0 as in PyTorch (Burn's ``MomentumConfig`` uses 0.1).

    >>> optim = SgdConfig(momentum=0.9, nesterov=True).init()
    >>> model = optim.step(1e-2, model, grads)  # doctest: +SKIP
    """

    momentum: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    grad_clipping: GradientClipping | None = None

    def validate(self) -> None:
        check_range("SgdConfig", "momentum", self.momentum, 0.0, 1.0, high_open=True)
        check_range("SgdConfig", "dampening", self.dampening, 0.0, 1.0)
        check_range("SgdConfig", "weight_decay", self.weight_decay, 0.0, math.inf, high_open=True)
        if self.nesterov and self.momentum == 0.0:
            raise ConfigError(
                "ember: SgdConfig: nesterov=True needs a momentum in (0, 1), got momentum=0.0; "
                "set momentum (e.g. SgdConfig(momentum=0.9, nesterov=True)) or drop nesterov"
            )

    def build(self) -> Sgd:
        return Sgd(self.momentum, self.dampening, self.nesterov, self.weight_decay)
