"""A constant learning rate."""

from __future__ import annotations

import math
from typing import Any

from ember.errors import ConfigError
from ember.optim.lr_scheduler.base import LrScheduler, LrSchedulerConfig


class ConstantLr(LrScheduler):
    """Returns the same rate at every step (Burn's ``ConstantLr``)."""

    def __init__(self, lr: float):
        self.lr = float(lr)

    def step(self) -> float:
        return self.lr

    def to_record(self) -> dict[str, Any]:
        return {}

    def load_record(self, record: dict[str, Any]) -> ConstantLr:
        self._fields(record, {})
        return self


class ConstantLrSchedulerConfig(LrSchedulerConfig):
    """A constant rate: ``ConstantLrSchedulerConfig(1e-3).init().step() == 1e-3``."""

    lr: float

    def validate(self) -> None:
        if not (math.isfinite(self.lr) and self.lr >= 0.0):
            raise ConfigError(f"ember: ConstantLrSchedulerConfig: lr must be a finite number >= 0, got {self.lr}")

    def init(self) -> ConstantLr:
        return ConstantLr(self.lr)
