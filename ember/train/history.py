"""``MetricHistory``: the epoch values of every metric, by split."""

from __future__ import annotations

import math
from typing import Any

from ember.train.metric.base import Direction, Split


class MetricHistory:
    """``{split: {metric name: {epoch: value}}}``, filled at the end of each epoch;
    early stopping, checkpoint strategies, plots and the summary read it."""

    def __init__(self) -> None:
        self.values: dict[str, dict[str, dict[int, float]]] = {"train": {}, "valid": {}}

    def record(self, split: Split | str, epoch: int, values: dict[str, float]) -> None:
        split = Split.parse(split).value
        for name, value in values.items():
            self.values[split].setdefault(name, {})[int(epoch)] = float(value)

    def find(self, name: str, epoch: int, split: Split | str) -> float | None:
        """The value of ``name`` at ``epoch`` (``None`` if not recorded)."""
        return self.values[Split.parse(split).value].get(name, {}).get(int(epoch))

    def series(self, name: str, split: Split | str) -> list[tuple[int, float]]:
        """``[(epoch, value)]`` in epoch order."""
        return sorted(self.values[Split.parse(split).value].get(name, {}).items())

    def names(self, split: Split | str | None = None) -> list[str]:
        splits = [Split.parse(split).value] if split is not None else ["train", "valid"]
        seen: list[str] = []
        for s in splits:
            seen.extend(n for n in self.values[s] if n not in seen)
        return seen

    def epochs(self) -> list[int]:
        found = {e for split in self.values.values() for series in split.values() for e in series}
        return sorted(found)

    def best(self, name: str, split: Split | str, direction: Direction) -> tuple[int, float] | None:
        """``(epoch, value)`` of the best value (the earliest on ties), NaNs ignored."""
        best = None
        for epoch, value in self.series(name, split):
            if math.isnan(value):
                continue
            if best is None or direction.better(value, best[1]):
                best = (epoch, value)
        return best

    def truncate(self, last_epoch: int) -> None:
        """Forget epochs after ``last_epoch``."""
        for split in self.values.values():
            for series in split.values():
                for epoch in [e for e in series if e > last_epoch]:
                    del series[epoch]

    def to_dict(self) -> dict[str, Any]:
        return {
            s: {n: {str(e): v for e, v in series.items()} for n, series in d.items()} for s, d in self.values.items()
        }

    @staticmethod
    def from_dict(data: dict[str, Any]) -> MetricHistory:
        history = MetricHistory()
        for split, names in data.items():
            for name, series in names.items():
                history.values.setdefault(split, {})[name] = {int(e): float(v) for e, v in series.items()}
        return history
