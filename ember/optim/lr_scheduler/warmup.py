"""Linear warm-up (from 0 by default) into another schedule."""

from __future__ import annotations

import math

from ember.errors import ConfigError
from ember.optim.lr_scheduler.base import LrSchedulerConfig, check_count
from ember.optim.lr_scheduler.constant import ConstantLrSchedulerConfig
from ember.optim.lr_scheduler.linear import LinearLrScheduler
from ember.optim.lr_scheduler.sequential import SequentialLrScheduler


class WarmupLrSchedulerConfig(LrSchedulerConfig):
    """``start_lr`` (default 0) rising linearly over ``warmup_iters`` steps to the rate
    ``scheduler`` starts at, then ``scheduler`` from its first step: step ``t < W``
    gives ``start_lr + (peak - start_lr) t / W``. The same rates as PyTorch's
    ``SequentialLR([LinearLR(start_factor=start_lr / peak, total_iters=W), scheduler],
    milestones=[W])``, with a start of 0 allowed; a plain number is a constant rate.
    ``init()`` gives a :class:`SequentialLrScheduler` (its records too).

    >>> from ember.optim.lr_scheduler import CosineAnnealingLrSchedulerConfig
    >>> scheduler = WarmupLrSchedulerConfig(CosineAnnealingLrSchedulerConfig(0.1, 2), warmup_iters=2).init()
    >>> [round(scheduler.step(), 6) for _ in range(5)]
    [0.0, 0.05, 0.1, 0.05, 0.0]
    """

    scheduler: LrSchedulerConfig | float
    warmup_iters: int
    start_lr: float = 0.0

    def validate(self) -> None:
        name = "WarmupLrSchedulerConfig"
        check_count(name, "warmup_iters", self.warmup_iters)
        peak = self._peak()
        if not (math.isfinite(self.start_lr) and 0.0 <= self.start_lr <= peak):
            raise ConfigError(
                f"ember: {name}: start_lr must lie in [0, {peak}] (the rate the scheduler starts at), got {self.start_lr}"
            )

    def _after(self) -> LrSchedulerConfig:
        if isinstance(self.scheduler, LrSchedulerConfig):
            return self.scheduler
        return ConstantLrSchedulerConfig(float(self.scheduler))

    def _peak(self) -> float:
        """The scheduler's first rate (read from a fresh instance: schedules are deterministic)."""
        return self._after().init().step()

    def init(self) -> SequentialLrScheduler:
        warmup = LinearLrScheduler(self.start_lr, self._peak(), self.warmup_iters)
        return SequentialLrScheduler([warmup, self._after().init()], [self.warmup_iters])
