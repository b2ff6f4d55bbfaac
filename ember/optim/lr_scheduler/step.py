"""A learning rate multiplied by ``gamma`` every ``step_size`` steps."""

from __future__ import annotations

import math
import warnings
from typing import Any

from ember.errors import ConfigError
from ember.optim.lr_scheduler.base import LrScheduler, LrSchedulerConfig, check_count


class StepLrScheduler(LrScheduler):
    """``initial_lr * gamma ** (t // step_size)`` at step ``t`` (from 0)."""

    def __init__(self, initial_lr: float, step_size: int, gamma: float):
        self.initial_lr = initial_lr
        self.step_size = step_size
        self.gamma = gamma
        self.iter_idx = -1

    def step(self) -> float:
        self.iter_idx += 1
        return self.initial_lr * self.gamma ** (self.iter_idx // self.step_size)

    def to_record(self) -> dict[str, Any]:
        return {"iter_idx": self.iter_idx}

    def load_record(self, record: dict[str, Any]) -> StepLrScheduler:
        self.iter_idx = self._fields(record, {"iter_idx": int})["iter_idx"]
        return self


class StepLrSchedulerConfig(LrSchedulerConfig):
    """Step decay (Burn's ``StepLrSchedulerConfig``, PyTorch's ``StepLR``). As in Burn,
    a non-positive ``initial_lr`` or a ``gamma`` outside ``(0, 1)`` only warns.

    >>> scheduler = StepLrSchedulerConfig(1.0, 2, gamma=0.5).init()
    >>> [scheduler.step() for _ in range(5)]
    [1.0, 1.0, 0.5, 0.5, 0.25]
    """

    initial_lr: float
    step_size: int
    gamma: float = 0.1

    def validate(self) -> None:
        name = "StepLrSchedulerConfig"
        check_count(name, "step_size", self.step_size)
        if not (math.isfinite(self.initial_lr) and math.isfinite(self.gamma)):
            raise ConfigError(
                f"ember: {name}: initial_lr and gamma must be finite, got {self.initial_lr}, {self.gamma}"
            )
        if self.initial_lr <= 0.0:
            warnings.warn(
                f"ember: {name}: initial_lr={self.initial_lr} is not positive; ignore this if intended", stacklevel=4
            )
        if not (0.0 < self.gamma < 1.0):
            warnings.warn(f"ember: {name}: gamma={self.gamma} is outside (0, 1); ignore this if intended", stacklevel=4)

    def init(self) -> StepLrScheduler:
        return StepLrScheduler(self.initial_lr, self.step_size, self.gamma)
