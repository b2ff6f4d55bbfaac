"""``AccuracyMetric`` and ``TopKAccuracyMetric`` for multiclass outputs, in percent."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember.errors import ConfigError
from ember.train.metric.base import Direction, ItemView, Metric, MetricMetadata, class_targets


class _CountMetric(Metric):
    unit = "%"
    direction = Direction.HIGHEST

    def __init__(self, name: str, pad_token: int | None):
        self.name = name
        self.pad_token = pad_token
        self.correct = 0
        self.total = 0

    def _hits(self, output: np.ndarray, targets: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def update(self, item: ItemView, metadata: MetricMetadata) -> float:
        output, targets = class_targets(self.name, item.array("output", self.name), item.array("targets", self.name))
        if self.pad_token is not None:
            keep = targets != self.pad_token
            output, targets = output[keep], targets[keep]
        hits = int(self._hits(output, targets).sum()) if targets.size else 0
        self.correct += hits
        self.total += int(targets.size)
        return 100.0 * hits / targets.size if targets.size else math.nan

    def value(self) -> float:
        return 100.0 * self.correct / self.total if self.total else math.nan

    def clear(self) -> None:
        self.correct = 0
        self.total = 0

    def state_dict(self) -> dict[str, Any]:
        return {"correct": self.correct, "total": self.total}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.correct, self.total = int(state["correct"]), int(state["total"])


class AccuracyMetric(_CountMetric):
    """The share of samples whose highest score is the target class, in percent.
    Reads ``item.output`` ``[..., num_classes]`` and ``item.targets`` ``[...]``;
    targets equal to ``pad_token`` are ignored (padded sequences)."""

    def __init__(self, pad_token: int | None = None, name: str = "Accuracy"):
        super().__init__(name, pad_token)

    def with_pad_token(self, pad_token: int) -> AccuracyMetric:
        self.pad_token = pad_token
        return self

    def _hits(self, output: np.ndarray, targets: np.ndarray) -> np.ndarray:
        return output.argmax(axis=-1) == targets


class TopKAccuracyMetric(_CountMetric):
    """The share of samples whose target is among the ``k`` highest scores, in percent."""

    def __init__(self, k: int, pad_token: int | None = None, name: str | None = None):
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"ember: TopKAccuracyMetric: k must be an int >= 1, got {k!r}")
        super().__init__(name or f"Top-{k} Accuracy", pad_token)
        self.k = k

    def _hits(self, output: np.ndarray, targets: np.ndarray) -> np.ndarray:
        k = min(self.k, output.shape[-1])
        top = np.argpartition(-output, k - 1, axis=-1)[:, :k]
        return (top == targets[:, None]).any(axis=-1)
