"""``LearningRateMetric``: the learning rate of each training step."""

from __future__ import annotations

import math
from typing import Any

from ember.train.metric.base import ItemView, Metric, MetricMetadata


class LearningRateMetric(Metric):
    """The rate the scheduler gave for the step; the epoch value is its mean over
    the epoch's steps. Training only."""

    train_only = True

    def __init__(self, name: str = "Learning Rate"):
        self.name = name
        self.clear()

    def update(self, item: ItemView, metadata: MetricMetadata) -> float:
        lr = math.nan if metadata.lr is None else float(metadata.lr)
        if not math.isnan(lr):
            self.total += lr
            self.count += 1
        return lr

    def value(self) -> float:
        return self.total / self.count if self.count else math.nan

    def format(self, value: float) -> str:
        return "n/a" if math.isnan(value) else f"{value:.3e}"

    def clear(self) -> None:
        self.total = 0.0
        self.count = 0

    def state_dict(self) -> dict[str, Any]:
        return {"total": self.total, "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.total, self.count = float(state["total"]), int(state["count"])
