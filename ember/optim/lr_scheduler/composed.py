"""Several schedulers stepped together, their rates combined (by default multiplied)."""

from __future__ import annotations

import enum
import math
from typing import Any

from ember.errors import ConfigError, RecordError
from ember.optim.lr_scheduler.base import LrScheduler, LrSchedulerConfig
from ember.optim.lr_scheduler.constant import ConstantLrSchedulerConfig


class SchedulerReduction(enum.Enum):
    """How :class:`ComposedLrScheduler` combines its schedulers' rates."""

    AVG = "avg"
    SUM = "sum"
    PROD = "prod"


class ComposedLrScheduler(LrScheduler):
    """Steps every scheduler once per :meth:`step` and reduces their rates."""

    def __init__(self, schedulers: list[LrScheduler], reduction: SchedulerReduction):
        self.schedulers = schedulers
        self.reduction = reduction

    def step(self) -> float:
        rates = [s.step() for s in self.schedulers]
        if self.reduction is SchedulerReduction.PROD:
            return math.prod(rates)
        total = math.fsum(rates)
        return total / len(rates) if self.reduction is SchedulerReduction.AVG and rates else total

    def to_record(self) -> dict[str, Any]:
        return {"schedulers": [s.to_record() for s in self.schedulers]}

    def load_record(self, record: dict[str, Any]) -> ComposedLrScheduler:
        children = self._fields(record, {"schedulers": list})["schedulers"]
        if len(children) != len(self.schedulers):
            raise RecordError(
                f"ember: ComposedLrScheduler.load_record: the record holds {len(children)} schedulers, "
                f"this scheduler has {len(self.schedulers)}"
            )
        for scheduler, child in zip(self.schedulers, children):
            scheduler.load_record(child)
        return self


class ComposedLrSchedulerConfig(LrSchedulerConfig):
    """Schedulers combined step by step (Burn's ``ComposedLrSchedulerConfig``); a plain
    number stands for a constant rate. With the default product, a schedule can be
    written as a base rate times shape factors:

    >>> from ember.optim.lr_scheduler import ExponentialLrSchedulerConfig, StepLrSchedulerConfig
    >>> config = ComposedLrSchedulerConfig([0.5, StepLrSchedulerConfig(1.0, 2, gamma=0.1)])
    >>> scheduler = config.add(ExponentialLrSchedulerConfig(1.0, 0.5)).init()  # add: a copy with one more
    >>> [scheduler.step() for _ in range(3)]
    [0.5, 0.25, 0.0125]
    """

    schedulers: list[LrSchedulerConfig | float]
    reduction: SchedulerReduction = SchedulerReduction.PROD

    def validate(self) -> None:
        for config in self.schedulers:
            if isinstance(config, bool) or not isinstance(config, (LrSchedulerConfig, int, float)):
                raise ConfigError(
                    f"ember: ComposedLrSchedulerConfig: schedulers must be scheduler configs or numbers, got {config!r}"
                )
            if not isinstance(config, LrSchedulerConfig):
                ConstantLrSchedulerConfig(float(config))

    def add(self, scheduler: LrSchedulerConfig | float) -> ComposedLrSchedulerConfig:
        """A copy with ``scheduler`` appended."""
        return self.replace(schedulers=[*self.schedulers, scheduler])

    def init(self) -> ComposedLrScheduler:
        built = [
            c.init() if isinstance(c, LrSchedulerConfig) else ConstantLrSchedulerConfig(float(c)).init()
            for c in self.schedulers
        ]
        return ComposedLrScheduler(built, self.reduction)
