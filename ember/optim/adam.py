"""Adam and AdamW (Kingma & Ba; Loshchilov & Hutter).

The update is the fused op ``FusedOp.ADAM_STEP_MANY``: one backend call for all the
tensors of a step (flex: one numpy pass over them; cube: one launch per tensor); its
composite, the reference the kernels follow operation by operation, is
:func:`ember.backend.composites.optim.adam_step_many`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ember.backend.ops import FusedOp
from ember.optim.base import OptimizerConfig, OptimizerState, check_betas, check_range
from ember.tensor import Tensor
from ember.tensor.fused import fused


@dataclasses.dataclass(slots=True)
class AdamState(OptimizerState):
    """The moments, the number of steps taken, and (AMSGrad) the largest second moment."""

    moment_1: Tensor
    moment_2: Tensor
    time: int
    max_moment_2: Tensor | None = None


class AdamConfig(OptimizerConfig):
    """Adam, with Burn's defaults (``epsilon=1e-5``; PyTorch uses 1e-8).
    ``weight_decay`` is an L2 penalty added to the gradient (AdamW decays the weights).

    >>> optim = AdamConfig().init()
    >>> model = optim.step(1e-2, model, grads)  # doctest: +SKIP
    """

    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-5
    weight_decay: float = 0.0
    amsgrad: bool = False

    state_type = AdamState
    decoupled = False  # AdamW: decay the weights instead of adding an L2 penalty

    def validate(self) -> None:
        check_betas(self, "beta_1", "beta_2")
        check_range(type(self).__name__, "epsilon", self.epsilon, 0.0, math.inf, low_open=True)
        check_range(type(self).__name__, "weight_decay", self.weight_decay, 0.0, math.inf)

    def step_many(
        self, lr: float, params: list[Tensor], grads: list[Tensor], states: list[AdamState | None]
    ) -> list[tuple[Tensor, AdamState]]:
        if not params:
            return []
        # One fused call per (device, step count, AMSGrad maximum kept): usually one.
        device, first = params[0]._device, states[0]
        time, has_max = (0, False) if first is None else (first.time, first.max_moment_2 is not None)
        uniform = True
        for p, s in zip(params, states):
            if p._device is not device or (
                (s is not None)
                if first is None
                else (s is None or s.time != time or (s.max_moment_2 is not None) != has_max)
            ):
                uniform = False
                break
        if uniform:
            return self._step_batch(lr, device, params, grads, states, time, has_max)
        batches: dict[tuple[int, int, bool], list[int]] = {}
        for i, (p, s) in enumerate(zip(params, states)):
            key = (id(p._device), 0, False) if s is None else (id(p._device), s.time, s.max_moment_2 is not None)
            batches.setdefault(key, []).append(i)
        results: list[Any] = [None] * len(params)
        for (_, time, has_max), indices in batches.items():
            stepped = self._step_batch(
                lr,
                params[indices[0]]._device,
                [params[i] for i in indices],
                [grads[i] for i in indices],
                [states[i] for i in indices],
                time,
                has_max,
            )
            for i, result in zip(indices, stepped):
                results[i] = result
        return results

    def _step_batch(
        self,
        lr: float,
        device: Any,
        params: list[Tensor],
        grads: list[Tensor],
        states: list[AdamState | None],
        time: int,
        has_max: bool,
    ) -> list[tuple[Tensor, AdamState]]:
        """One fused call for tensors on one device at one step count (with or
        without an AMSGrad maximum): past the first step every one has a state."""
        first_step = time == 0
        old: list[Any] = states
        new, m, v, v_max = fused(
            FusedOp.ADAM_STEP_MANY,
            device,
            [p._primitive for p in params],
            [g._primitive for g in grads],
            None if first_step else [s.moment_1._primitive for s in old],
            None if first_step else [s.moment_2._primitive for s in old],
            [s.max_moment_2._primitive for s in old] if has_max else None,
            lr=lr,
            beta_1=self.beta_1,
            beta_2=self.beta_2,
            epsilon=self.epsilon,
            weight_decay=self.weight_decay,
            decoupled=self.decoupled,
            amsgrad=self.amsgrad,
            time=time + 1,
        )
        time += 1
        if v_max is None:
            return [
                (Tensor(n, device), AdamState(Tensor(a, device), Tensor(b, device), time)) for n, a, b in zip(new, m, v)
            ]
        return [
            (Tensor(n, device), AdamState(Tensor(a, device), Tensor(b, device), time, Tensor(c, device)))
            for n, a, b, c in zip(new, m, v, v_max)
        ]


class AdamWConfig(AdamConfig):
    """AdamW: Adam with decoupled weight decay (Burn's default decay 1e-4).

    >>> optim = AdamWConfig(weight_decay=0.01).init()
    """

    weight_decay: float = 1e-4

    decoupled = True
