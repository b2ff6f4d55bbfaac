"""Schedulers run one after another, switching at milestones."""

from __future__ import annotations

import bisect
from typing import Any

from ember.errors import ConfigError, RecordError
from ember.optim.lr_scheduler.base import LrScheduler, LrSchedulerConfig


class SequentialLrScheduler(LrScheduler):
    """Scheduler ``i`` runs while ``milestones[i-1] <= t < milestones[i]`` (``t`` = the
    steps taken so far); each one starts from its own first step."""

    def __init__(self, schedulers: list[LrScheduler], milestones: list[int]):
        self.schedulers = schedulers
        self.milestones = milestones
        self.step_count = 0

    def step(self) -> float:
        index = bisect.bisect_right(self.milestones, self.step_count)
        lr = self.schedulers[index].step()
        self.step_count += 1
        return lr

    def to_record(self) -> dict[str, Any]:
        return {"step": self.step_count, "schedulers": [s.to_record() for s in self.schedulers]}

    def load_record(self, record: dict[str, Any]) -> SequentialLrScheduler:
        fields = self._fields(record, {"step": int, "schedulers": list})
        children = fields["schedulers"]
        if len(children) != len(self.schedulers):
            raise RecordError(
                f"ember: SequentialLrScheduler.load_record: the record holds {len(children)} schedulers, "
                f"this scheduler has {len(self.schedulers)}"
            )
        for scheduler, child in zip(self.schedulers, children):
            scheduler.load_record(child)
        self.step_count = fields["step"]
        return self


class SequentialLrSchedulerConfig(LrSchedulerConfig):
    """One scheduler after another (Burn's ``SequentialLrSchedulerConfig``, PyTorch's
    ``SequentialLR``): ``N`` schedulers need ``N - 1`` milestones, each > 0 and
    strictly increasing; milestone ``m`` is the number of steps after which the next
    scheduler takes over.

    >>> from ember.optim.lr_scheduler import CosineAnnealingLrSchedulerConfig, LinearLrSchedulerConfig
    >>> warmup = LinearLrSchedulerConfig(0.01, 0.1, 2)
    >>> decay = CosineAnnealingLrSchedulerConfig(0.1, 2)
    >>> scheduler = SequentialLrSchedulerConfig([warmup, decay], [3]).init()
    >>> [round(scheduler.step(), 6) for _ in range(6)]
    [0.01, 0.055, 0.1, 0.1, 0.05, 0.0]
    """

    schedulers: list[LrSchedulerConfig]
    milestones: list[int]

    def validate(self) -> None:
        name = "SequentialLrSchedulerConfig"
        if not self.schedulers:
            raise ConfigError(f"ember: {name}: needs at least one scheduler config, got []")
        for config in self.schedulers:
            if not isinstance(config, LrSchedulerConfig):
                raise ConfigError(f"ember: {name}: schedulers must be scheduler configs, got {config!r}")
        if len(self.milestones) + 1 != len(self.schedulers):
            raise ConfigError(
                f"ember: {name}: {len(self.schedulers)} schedulers need {len(self.schedulers) - 1} milestones, "
                f"got {len(self.milestones)} ({self.milestones})"
            )
        previous = 0
        for milestone in self.milestones:
            if isinstance(milestone, bool) or not isinstance(milestone, int) or milestone <= previous:
                raise ConfigError(
                    f"ember: {name}: milestones must be integers > 0 and strictly increasing, got {self.milestones}"
                )
            previous = milestone

    def init(self) -> SequentialLrScheduler:
        return SequentialLrScheduler([c.init() for c in self.schedulers], list(self.milestones))
