"""A learning rate that moves linearly from ``initial_lr`` to ``final_lr``."""

from __future__ import annotations

from typing import Any

from ember.optim.lr_scheduler.base import LrScheduler, LrSchedulerConfig, check_count, check_lr


class LinearLrScheduler(LrScheduler):
    """``initial_lr`` at the first step, then a constant change per step until
    ``final_lr`` after ``num_iters`` steps; ``final_lr`` from then on."""

    def __init__(self, initial_lr: float, final_lr: float, num_iters: int):
        self.initial_lr = initial_lr
        self.final_lr = final_lr
        self.num_iters = num_iters
        self.remaining_iters = num_iters + 1

    def step(self) -> float:
        if self.remaining_iters > 0:
            self.remaining_iters -= 1
        done = (self.num_iters - self.remaining_iters) / self.num_iters
        return self.initial_lr * (1.0 - done) + self.final_lr * done  # exact at both ends

    def to_record(self) -> dict[str, Any]:
        return {"remaining_iters": self.remaining_iters}

    def load_record(self, record: dict[str, Any]) -> LinearLrScheduler:
        self.remaining_iters = self._fields(record, {"remaining_iters": int})["remaining_iters"]
        return self


class LinearLrSchedulerConfig(LrSchedulerConfig):
    """Linear warm-up or decay (Burn's ``LinearLrSchedulerConfig``; PyTorch's
    ``LinearLR`` with factors relative to the initial rate). Unlike Burn (and
    ``LinearLR``'s ``start_factor``), ``initial_lr`` may be 0: a warm-up from 0 (see
    also :class:`~ember.optim.lr_scheduler.WarmupLrSchedulerConfig`).

    >>> scheduler = LinearLrSchedulerConfig(1e-2, 1e-3, 3).init()
    >>> [round(scheduler.step(), 6) for _ in range(5)]
    [0.01, 0.007, 0.004, 0.001, 0.001]
    """

    initial_lr: float
    final_lr: float
    num_iters: int

    def validate(self) -> None:
        check_lr("LinearLrSchedulerConfig", "initial_lr", self.initial_lr, allow_zero=True)
        check_lr("LinearLrSchedulerConfig", "final_lr", self.final_lr, allow_zero=True)
        check_count("LinearLrSchedulerConfig", "num_iters", self.num_iters)

    def init(self) -> LinearLrScheduler:
        return LinearLrScheduler(self.initial_lr, self.final_lr, self.num_iters)
