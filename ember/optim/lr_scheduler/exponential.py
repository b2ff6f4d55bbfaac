"""A learning rate multiplied by ``gamma`` at every step."""

from __future__ import annotations

from typing import Any

from ember.errors import ConfigError
from ember.optim.lr_scheduler.base import LrScheduler, LrSchedulerConfig, check_lr


class ExponentialLrScheduler(LrScheduler):
    """``initial_lr * gamma**t`` at step ``t`` (from 0), computed by repeated products
    as Burn and PyTorch's ``ExponentialLR`` do."""

    def __init__(self, initial_lr: float, gamma: float):
        self.gamma = gamma
        self.previous_lr = initial_lr / gamma

    def step(self) -> float:
        self.previous_lr *= self.gamma
        return self.previous_lr

    def to_record(self) -> dict[str, Any]:
        return {"previous_lr": self.previous_lr}

    def load_record(self, record: dict[str, Any]) -> ExponentialLrScheduler:
        self.previous_lr = float(self._fields(record, {"previous_lr": float})["previous_lr"])
        return self


class ExponentialLrSchedulerConfig(LrSchedulerConfig):
    """Exponential decay (Burn's ``ExponentialLrSchedulerConfig``).

    >>> scheduler = ExponentialLrSchedulerConfig(0.1, 0.5).init()
    >>> [scheduler.step() for _ in range(3)]
    [0.1, 0.05, 0.025]
    """

    initial_lr: float
    gamma: float

    def validate(self) -> None:
        check_lr("ExponentialLrSchedulerConfig", "initial_lr", self.initial_lr, allow_zero=False)
        if not (0.0 < self.gamma <= 1.0):
            raise ConfigError(f"ember: ExponentialLrSchedulerConfig: gamma must lie in (0, 1], got {self.gamma}")

    def init(self) -> ExponentialLrScheduler:
        return ExponentialLrScheduler(self.initial_lr, self.gamma)
