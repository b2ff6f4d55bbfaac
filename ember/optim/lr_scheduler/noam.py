"""The Noam schedule of "Attention Is All You Need": linear warm-up, then ``1/sqrt(t)``."""

from __future__ import annotations

import math
from typing import Any

from ember.errors import ConfigError
from ember.optim.lr_scheduler.base import LrScheduler, LrSchedulerConfig, check_count


class NoamLrScheduler(LrScheduler):
    """``factor * model_size**-0.5 * min(t**-0.5, t * warmup_steps**-1.5)`` at step
    ``t`` (from 1)."""

    def __init__(self, factor: float, warmup_steps: int, model_size: int):
        self.factor = factor
        self.warmup_steps = warmup_steps
        self.model_size = model_size
        self.step_count = 0

    def step(self) -> float:
        self.step_count += 1
        t = float(self.step_count)
        return self.factor * self.model_size**-0.5 * min(t**-0.5, t * self.warmup_steps**-1.5)

    def to_record(self) -> dict[str, Any]:
        return {"step": self.step_count}

    def load_record(self, record: dict[str, Any]) -> NoamLrScheduler:
        self.step_count = self._fields(record, {"step": int})["step"]
        return self


class NoamLrSchedulerConfig(LrSchedulerConfig):
    """Noam warm-up and decay (Burn's ``NoamLrSchedulerConfig`` and defaults).

    >>> scheduler = NoamLrSchedulerConfig(1.0, warmup_steps=4, model_size=16).init()
    >>> [round(scheduler.step(), 4) for _ in range(6)]
    [0.0312, 0.0625, 0.0938, 0.125, 0.1118, 0.1021]
    """

    factor: float
    warmup_steps: int = 4000
    model_size: int = 512

    def validate(self) -> None:
        name = "NoamLrSchedulerConfig"
        if not (math.isfinite(self.factor) and self.factor > 0.0):
            raise ConfigError(f"ember: {name}: factor must be a finite number > 0, got {self.factor}")
        check_count(name, "warmup_steps", self.warmup_steps)
        check_count(name, "model_size", self.model_size)

    def init(self) -> NoamLrScheduler:
        return NoamLrScheduler(self.factor, self.warmup_steps, self.model_size)
