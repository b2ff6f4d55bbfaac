"""``AurocMetric``: the area under the ROC curve, from all scores of the epoch."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember.errors import ConfigError, ShapeError
from ember.train.metric.base import Direction, ItemView, Metric, MetricMetadata, class_targets
from ember.train.metric.confusion import binary_scores, softmax


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of ``values``, ties sharing their mean rank."""
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_values)) + 1]
    ends = np.r_[starts[1:], len(values)]
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return ranks


def binary_auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """The probability that a random positive scores above a random negative
    (ties count half): the Mann-Whitney U statistic over ``n_pos * n_neg``."""
    n_pos = int(positive.sum())
    n_neg = positive.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return math.nan
    ranks = average_ranks(scores)
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


class AurocMetric(Metric):
    """ROC AUC in percent. Binary outputs (``[N]``, ``[N, 1]`` or ``[N, 2]``) with 0/1
    targets give the usual AUC; ``multiclass=True`` takes outputs ``[N, C]`` and
    class-index targets and averages the one-vs-rest AUCs of the classes
    (``sklearn``'s ``multi_class="ovr", average="macro"``). The epoch value uses all
    scores of the epoch, not a mean of batch values; it is undefined (n/a) while a
    class has no positive or no negative sample."""

    unit = "%"
    direction = Direction.HIGHEST

    def __init__(self, multiclass: bool = False, name: str = "AUROC"):
        if not isinstance(multiclass, bool):
            raise ConfigError(f"ember: AurocMetric: multiclass must be a bool, got {multiclass!r}")
        self.name = name
        self.multiclass = multiclass
        self.clear()

    def _read(self, item: ItemView) -> tuple[np.ndarray, np.ndarray]:
        output = item.array("output", self.name).astype(np.float64)
        targets = item.array("targets", self.name)
        if not self.multiclass:
            return binary_scores(self.name, output, targets, probabilities=False)
        scores, labels = class_targets(self.name, output, targets)
        if labels.size and (labels.min() < 0 or labels.max() >= scores.shape[1]):
            raise ShapeError(f"ember: {self.name}: targets must lie in [0, {scores.shape[1]})")
        return softmax(scores), labels

    def _auc(self, scores: np.ndarray, labels: np.ndarray) -> float:
        if not self.multiclass:
            return binary_auc(scores, labels == 1)
        aucs = [binary_auc(scores[:, c], labels == c) for c in range(scores.shape[1])]
        if any(math.isnan(a) for a in aucs):
            return math.nan
        return float(np.mean(aucs))

    def update(self, item: ItemView, metadata: MetricMetadata) -> float:
        scores, labels = self._read(item)
        self.scores.append(scores)
        self.labels.append(labels)
        return 100.0 * self._auc(scores, labels)

    def value(self) -> float:
        if not self.scores:
            return math.nan
        return 100.0 * self._auc(np.concatenate(self.scores), np.concatenate(self.labels))

    def clear(self) -> None:
        self.scores: list[np.ndarray] = []
        self.labels: list[np.ndarray] = []

    def state_dict(self) -> dict[str, Any]:
        if not self.scores:
            return {"scores": [], "labels": []}
        return {"scores": np.concatenate(self.scores).tolist(), "labels": np.concatenate(self.labels).tolist()}

    def merge_states(self, states: list[dict[str, Any]]) -> dict[str, Any]:
        """Every rank's scores and labels, concatenated."""
        return {"scores": [x for s in states for x in s["scores"]], "labels": [x for s in states for x in s["labels"]]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.clear()
        if state["labels"]:
            self.scores.append(np.asarray(state["scores"], dtype=np.float64))
            self.labels.append(np.asarray(state["labels"], dtype=np.int64))
