"""Adam and AdamW (Kingma & Ba; Loshchilov & Hutter)."""

from __future__ import annotations

import dataclasses
import math

from ember.backend.fusion.scalars import scalar_sqrt
from ember.optim.base import OptimizerConfig, OptimizerState, SimpleOptimizer, check_range
from ember.optim.clipping import GradientClipping
from ember.tensor import Tensor
from ember.tensor.fused import fused


@dataclasses.dataclass(slots=True)
class AdamState(OptimizerState):
    moment_1: Tensor
    moment_2: Tensor
    time: int
    max_moment_2: Tensor | None = None


class Adam(SimpleOptimizer):
    """Adam on one tensor. ``weight_decay`` is an L2 penalty added to the gradient
    (Adam) or a decoupled decay of the weights (AdamW, ``decoupled=True``)."""

    state_type = AdamState

    def __init__(self, beta_1: float, beta_2: float, epsilon: float, weight_decay: float,
                 amsgrad: bool, decoupled: bool):
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.weight_decay = weight_decay
        self.amsgrad = amsgrad
        self.decoupled = decoupled

    def step(self, lr: float, tensor: Tensor, grad: Tensor, state: AdamState | None) -> tuple[Tensor, AdamState]:
        time = 1 if state is None else state.time + 1
        out = fused(
            "adam_step", tensor, grad,
            None if state is None else state.moment_1,
            None if state is None else state.moment_2,
            None if state is None else state.max_moment_2,
            lr=lr, beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon,
            weight_decay=self.weight_decay, decoupled=self.decoupled, amsgrad=self.amsgrad, time=time,
        )
        if out is not None:
            new_tensor, m, v, v_max = out
            return new_tensor, AdamState(m, v, time, v_max)
        return self._composite(lr, tensor, grad, state)

    def step_many(self, lr: float, tensors: list[Tensor], grads: list[Tensor], states: list[AdamState | None]):
        if not tensors:
            return []
        first = states[0]
        if len(tensors) > 1:
            if first is None:
                uniform = all(s is None for s in states)
                time = 1
            else:
                time = first.time
                uniform = all(s is not None and s.time == time for s in states)
                time += 1
            if uniform:
                out = self._fused_many(lr, tensors, grads, states, time)
                if out is not None:
                    return out
        return super().step_many(lr, tensors, grads, states)

    def _fused_many(self, lr, tensors, grads, states, time):
        """The backend's multi-tensor kernel, or ``None`` when it has none."""
        device = tensors[0].device
        if states[0] is None:
            m1 = m2 = vm = None
        else:
            m1 = [s.moment_1.primitive for s in states]
            m2 = [s.moment_2.primitive for s in states]
            vm = None if states[0].max_moment_2 is None else [s.max_moment_2.primitive for s in states]
        out = device.backend.adam_step_many(
            [t.primitive for t in tensors], [g.primitive for g in grads], m1, m2, vm,
            lr=lr, beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon,
            weight_decay=self.weight_decay, decoupled=self.decoupled, amsgrad=self.amsgrad, time=time,
        )
        if out is NotImplemented:
            return None
        new, m, v, v_max = out
        if v_max is None:
            return [(Tensor(p, device), AdamState(Tensor(a, device), Tensor(b, device), time))
                    for p, a, b in zip(new, m, v)]
        return [(Tensor(p, device), AdamState(Tensor(a, device), Tensor(b, device), time, Tensor(c, device)))
                for p, a, b, c in zip(new, m, v, v_max)]

    def _composite(self, lr: float, tensor: Tensor, grad: Tensor, state: AdamState | None) -> tuple[Tensor, AdamState]:
        b1, b2 = self.beta_1, self.beta_2
        if self.weight_decay and not self.decoupled:
            grad = grad.add(tensor.mul_scalar(self.weight_decay))
        if state is None:
            m = grad.mul_scalar(1.0 - b1)
            v = grad.mul(grad).mul_scalar(1.0 - b2)
            time = 1
        else:
            m = state.moment_1.mul_scalar(b1).add(grad.mul_scalar(1.0 - b1))
            v = state.moment_2.mul_scalar(b2).add(grad.mul(grad).mul_scalar(1.0 - b2))
            time = state.time + 1
        v_max = None
        if self.amsgrad:
            v_max = v if state is None or state.max_moment_2 is None else state.max_moment_2.maximum(v)
        denom_source = v_max if v_max is not None else v
        correction_1 = 1.0 - b1**time
        correction_2 = 1.0 - b2**time
        denom = denom_source.sqrt().div_scalar(scalar_sqrt(correction_2)).add_scalar(self.epsilon)
        update = m.div(denom).mul_scalar(lr / correction_1)
        if self.weight_decay and self.decoupled:
            tensor = tensor.mul_scalar(1.0 - lr * self.weight_decay)
        return tensor.sub(update), AdamState(m, v, time, v_max)


class AdamConfig(OptimizerConfig):
    """Adam, with Burn's defaults (``epsilon=1e-5``; PyTorch uses 1e-8).

    >>> optim = AdamConfig().init()
    >>> model = optim.step(1e-2, model, grads)  # doctest: +SKIP
    """

    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-5
    weight_decay: float = 0.0
    amsgrad: bool = False
    grad_clipping: GradientClipping | None = None

    def validate(self) -> None:
        check_range("AdamConfig", "beta_1", self.beta_1, 0.0, 1.0, high_open=True)
        check_range("AdamConfig", "beta_2", self.beta_2, 0.0, 1.0, high_open=True)
        check_range("AdamConfig", "epsilon", self.epsilon, 0.0, math.inf, low_open=True)
        check_range("AdamConfig", "weight_decay", self.weight_decay, 0.0, math.inf)

    def build(self) -> Adam:
        return Adam(self.beta_1, self.beta_2, self.epsilon, self.weight_decay, self.amsgrad, decoupled=False)


class AdamWConfig(OptimizerConfig):
    """AdamW: Adam with decoupled weight decay (Burn's default decay 1e-4)."""

    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-5
    weight_decay: float = 1e-4
    amsgrad: bool = False
    grad_clipping: GradientClipping | None = None

    def validate(self) -> None:
        check_range("AdamWConfig", "beta_1", self.beta_1, 0.0, 1.0, high_open=True)
        check_range("AdamWConfig", "beta_2", self.beta_2, 0.0, 1.0, high_open=True)
        check_range("AdamWConfig", "epsilon", self.epsilon, 0.0, math.inf, low_open=True)
        check_range("AdamWConfig", "weight_decay", self.weight_decay, 0.0, math.inf)

    def build(self) -> Adam:
        return Adam(self.beta_1, self.beta_2, self.epsilon, self.weight_decay, self.amsgrad, decoupled=True)
