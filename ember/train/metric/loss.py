"""``LossMetric``: the mean loss per sample over the epoch."""

from __future__ import annotations

from typing import Any

from ember.train.metric.base import Direction, ItemView, Metric, MetricMetadata, NumericMetricState


class LossMetric(Metric):
    """Reads ``item.loss`` (a one-element tensor, the batch mean); the epoch value is
    the mean weighted by batch size, i.e. the per-sample mean over the epoch."""

    unit = ""
    direction = Direction.LOWEST

    def __init__(self, name: str = "Loss"):
        self.name = name
        self.state = NumericMetricState()

    def update(self, item: ItemView, metadata: MetricMetadata) -> float:
        value = item.scalar("loss", self.name)
        self.state.update(value, metadata.batch_size)
        return value

    def value(self) -> float:
        return self.state.value()

    def clear(self) -> None:
        self.state.reset()

    def state_dict(self) -> dict[str, Any]:
        return self.state.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.state.load_state_dict(state)
