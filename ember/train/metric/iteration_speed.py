"""``IterationSpeedMetric``: iterations per second."""

from __future__ import annotations

import math
import time
from typing import Any

from ember.train.metric.base import Direction, ItemView, Metric, MetricMetadata


class IterationSpeedMetric(Metric):
    """Iterations per second since the epoch started (the metric is cleared when an
    epoch starts); ``items=True`` counts samples per second instead."""

    direction = Direction.HIGHEST

    def __init__(self, items: bool = False, name: str | None = None):
        self.items = items
        self.name = name or ("Items Speed" if items else "Iteration Speed")
        self.unit = "items/s" if items else "iter/s"
        self.clear()

    def update(self, item: ItemView, metadata: MetricMetadata) -> float:
        self.done += metadata.batch_size if self.items else 1
        self.elapsed = time.perf_counter() - self.start
        return self.value()

    def value(self) -> float:
        return self.done / self.elapsed if self.elapsed > 0 and self.done else math.nan

    def format(self, value: float) -> str:
        return "n/a" if math.isnan(value) else f"{value:.2f} {self.unit}"

    def clear(self) -> None:
        self.start = time.perf_counter()
        self.done = 0
        self.elapsed = 0.0

    def state_dict(self) -> dict[str, Any]:
        return {}
