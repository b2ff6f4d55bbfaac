"""Cosine annealing of the learning rate (SGDR's curve, without restarts)."""

from __future__ import annotations

import math
from typing import Any

from ember.errors import ConfigError
from ember.optim.lr_scheduler.base import LrScheduler, LrSchedulerConfig, check_count, check_lr


class CosineAnnealingLrScheduler(LrScheduler):
    """``min_lr + (initial_lr - min_lr) (1 + cos(pi t / num_iters)) / 2`` at step ``t``
    (from 0). Past ``num_iters`` the curve goes on (back up), as PyTorch's
    ``CosineAnnealingLR`` and Burn's scheduler do."""

    def __init__(self, initial_lr: float, min_lr: float, num_iters: int):
        self.max_lr = initial_lr
        self.min_lr = min_lr
        self.num_iters = num_iters
        self.current_iter = -1

    def step(self) -> float:
        self.current_iter += 1
        cosine = math.cos(self.current_iter / self.num_iters * math.pi)
        return self.min_lr + 0.5 * (self.max_lr - self.min_lr) * (1.0 + cosine)

    def to_record(self) -> dict[str, Any]:
        return {"current_iter": self.current_iter}

    def load_record(self, record: dict[str, Any]) -> CosineAnnealingLrScheduler:
        self.current_iter = self._fields(record, {"current_iter": int})["current_iter"]
        return self


class CosineAnnealingLrSchedulerConfig(LrSchedulerConfig):
    """Cosine annealing from ``initial_lr`` to ``min_lr`` over ``num_iters`` steps
    (Burn's ``CosineAnnealingLrSchedulerConfig``; Burn has no warm restarts).

    >>> scheduler = CosineAnnealingLrSchedulerConfig(1.0, 2, min_lr=0.0).init()
    >>> [round(scheduler.step(), 6) for _ in range(3)]
    [1.0, 0.5, 0.0]
    """

    initial_lr: float
    num_iters: int
    min_lr: float = 0.0

    def validate(self) -> None:
        name = "CosineAnnealingLrSchedulerConfig"
        check_lr(name, "initial_lr", self.initial_lr, allow_zero=False)
        check_count(name, "num_iters", self.num_iters)
        if not (0.0 <= self.min_lr <= self.initial_lr):
            raise ConfigError(
                f"ember: {name}: min_lr must lie in [0, initial_lr] = [0, {self.initial_lr}], got {self.min_lr}"
            )

    def init(self) -> CosineAnnealingLrScheduler:
        return CosineAnnealingLrScheduler(self.initial_lr, self.min_lr, self.num_iters)
