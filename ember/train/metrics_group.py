"""``MetricGroup``: the metrics of one split, updated together from each item."""

from __future__ import annotations

from typing import Any

from ember.errors import ConfigError
from ember.train.metric.base import ItemView, Metric, MetricEntry, MetricMetadata, Split


class MetricGroup:
    """The registered metrics of a split; ``numeric`` ones go to plots and the summary."""

    def __init__(self, split: Split):
        self.split = split
        self.metrics: list[Metric] = []
        self.numeric: list[bool] = []

    def add(self, metric: Metric, numeric: bool) -> None:
        if not isinstance(metric, Metric):
            raise ConfigError(
                f"ember: metric_{self.split.value}: expected a Metric (e.g. LossMetric(), AccuracyMetric()), "
                f"got {type(metric).__name__}"
            )
        if self.split is Split.VALID and metric.train_only:
            raise ConfigError(
                f"ember: metric_valid: {metric.name} exists only in training; register it with metric_train"
            )
        if metric.name in self.names():
            raise ConfigError(
                f"ember: metric_{self.split.value}: a metric named {metric.name!r} is already registered; "
                "give the second one another name (name=...)"
            )
        self.metrics.append(metric)
        self.numeric.append(numeric)

    def names(self) -> list[str]:
        return [m.name for m in self.metrics]

    def numeric_names(self) -> list[str]:
        return [m.name for m, n in zip(self.metrics, self.numeric) if n]

    def start_epoch(self) -> None:
        for m in self.metrics:
            m.clear()

    def update(self, item: Any, metadata: MetricMetadata) -> list[MetricEntry]:
        view = ItemView(item)
        return [m.entry(m.update(view, metadata)) for m in self.metrics]

    def epoch_values(self) -> dict[str, float]:
        return {m.name: float(m.value()) for m in self.metrics}

    def epoch_entries(self, values: dict[str, float]) -> list[MetricEntry]:
        return [
            MetricEntry(m.name, values[m.name], values[m.name], f"{m.name} {m.format(values[m.name])}")
            for m in self.metrics
            if m.name in values
        ]

    def state_dict(self) -> dict[str, Any]:
        return {m.name: m.state_dict() for m in self.metrics}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for m in self.metrics:
            if state.get(m.name):
                m.load_state_dict(state[m.name])
