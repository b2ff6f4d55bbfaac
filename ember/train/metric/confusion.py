"""Confusion counts shared by precision, recall and F-scores: how predictions are
decided (binary threshold, multiclass top-k, multilabel threshold) and how per-class
values are reduced (micro or macro)."""

from __future__ import annotations

import math
from enum import Enum
from typing import Any

import numpy as np

from ember.errors import ConfigError, ShapeError
from ember.train.metric.base import Direction, ItemView, Metric, MetricMetadata, class_targets


class ClassReduction(Enum):
    """``MICRO``: one value from the counts summed over classes; ``MACRO``: the mean
    of the per-class values (classes without a defined value are left out)."""

    MICRO = "micro"
    MACRO = "macro"


def sigmoid(x: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -x))


def softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=-1, keepdims=True)


def binary_scores(
    metric: str, output: np.ndarray, targets: np.ndarray, probabilities: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Positive-class probabilities ``[N]`` and 0/1 targets ``[N]`` from output ``[N]``,
    ``[N, 1]`` (a logit or a probability) or ``[N, 2]`` (two class scores)."""
    targets = targets.reshape(-1)
    if output.ndim == 2 and output.shape[1] == 2:
        scores = output[:, 1] if probabilities else softmax(output)[:, 1]
    elif output.ndim == 1 or (output.ndim == 2 and output.shape[1] == 1):
        scores = output.reshape(-1) if probabilities else sigmoid(output.reshape(-1))
    else:
        raise ShapeError(
            f"ember: {metric}: a binary metric needs output [N], [N, 1] or [N, 2], got {list(output.shape)}; "
            "use the multiclass or multilabel variant for more classes"
        )
    if scores.shape[0] != targets.shape[0]:
        raise ShapeError(
            f"ember: {metric}: output {list(output.shape)} and targets {list(targets.shape)} differ in size"
        )
    if targets.size and not np.all((targets == 0) | (targets == 1)):
        raise ShapeError(f"ember: {metric}: binary targets must be 0 or 1")
    return scores, targets.astype(np.int64)


class ConfusionMetric(Metric):
    """Base of precision, recall and F-scores: accumulates per-class true positives,
    false positives and false negatives over the epoch (so the epoch value is the
    value on all its samples, as ``sklearn.metrics`` computes it), in percent."""

    unit = "%"
    direction = Direction.HIGHEST
    tp: np.ndarray  # per-class counts over the epoch (set by clear)
    fp: np.ndarray
    fn: np.ndarray

    def __init__(
        self,
        name: str,
        *,
        mode: str = "multiclass",
        threshold: float = 0.5,
        top_k: int = 1,
        class_reduction: ClassReduction = ClassReduction.MACRO,
        probabilities: bool = False,
    ):
        if mode not in ("binary", "multiclass", "multilabel"):
            raise ConfigError(f"ember: {name}: mode must be 'binary', 'multiclass' or 'multilabel', got {mode!r}")
        if not 0.0 <= threshold <= 1.0:
            raise ConfigError(f"ember: {name}: threshold must lie in [0, 1], got {threshold}")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ConfigError(f"ember: {name}: top_k must be an int >= 1, got {top_k!r}")
        if not isinstance(class_reduction, ClassReduction):
            raise ConfigError(f"ember: {name}: class_reduction must be a ClassReduction, got {class_reduction!r}")
        self.name = name
        self.mode = mode
        self.threshold = float(threshold)
        self.top_k = top_k
        self.class_reduction = class_reduction
        self.probabilities = probabilities
        self.clear()

    # Burn's constructors ------------------------------------------------------
    @classmethod
    def binary(cls, threshold: float = 0.5, **kwargs: Any) -> Any:
        """Positive class decided by ``probability >= threshold``."""
        return cls(mode="binary", threshold=threshold, **kwargs)

    @classmethod
    def multiclass(cls, top_k: int = 1, **kwargs: Any) -> Any:
        """The ``top_k`` highest-scoring classes are predicted."""
        return cls(mode="multiclass", top_k=top_k, **kwargs)

    @classmethod
    def multilabel(cls, threshold: float = 0.5, **kwargs: Any) -> Any:
        """Each label decided by ``sigmoid(score) >= threshold``."""
        return cls(mode="multilabel", threshold=threshold, **kwargs)

    def with_class_reduction(self, class_reduction: ClassReduction) -> Any:
        self.class_reduction = class_reduction
        return self

    # counts ---------------------------------------------------------------------
    def _counts(self, item: ItemView) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        output = item.array("output", self.name).astype(np.float64)
        targets = item.array("targets", self.name)
        if self.mode == "binary":
            scores, y = binary_scores(self.name, output, targets, self.probabilities)
            pred = (scores >= self.threshold)[:, None]
            true = (y == 1)[:, None]
        elif self.mode == "multilabel":
            if output.shape != targets.shape or output.ndim != 2:
                raise ShapeError(
                    f"ember: {self.name}: multilabel output {list(output.shape)} and targets {list(targets.shape)} "
                    "must both be [N, num_labels]"
                )
            probs = output if self.probabilities else sigmoid(output)
            pred = probs >= self.threshold
            true = targets.astype(bool)
        else:
            if targets.shape == output.shape and output.ndim >= 2:  # one-hot targets
                targets = targets.argmax(axis=-1)
            scores, labels = class_targets(self.name, output, targets)
            n, classes = scores.shape
            if labels.size and (labels.min() < 0 or labels.max() >= classes):
                raise ShapeError(f"ember: {self.name}: targets must lie in [0, {classes}) for {classes} output classes")
            k = min(self.top_k, classes)
            top = np.argpartition(-scores, k - 1, axis=-1)[:, :k]
            pred = np.zeros((n, classes), dtype=bool)
            np.put_along_axis(pred, top, True, axis=-1)
            true = np.zeros((n, classes), dtype=bool)
            true[np.arange(n), labels] = True
        tp = (pred & true).sum(axis=0)
        fp = (pred & ~true).sum(axis=0)
        fn = (~pred & true).sum(axis=0)
        return tp, fp, fn

    def _score(self, tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> np.ndarray:
        """Per-class (or, given summed counts, micro) values; NaN where undefined."""
        raise NotImplementedError

    def _reduce(self, tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> float:
        if tp.size == 0:
            return math.nan
        if self.class_reduction is ClassReduction.MICRO:
            values = self._score(tp.sum(keepdims=True), fp.sum(keepdims=True), fn.sum(keepdims=True))
        else:
            values = self._score(tp, fp, fn)
        values = values[~np.isnan(values)]
        return 100.0 * float(values.mean()) if values.size else math.nan

    def update(self, item: ItemView, metadata: MetricMetadata) -> float:
        tp, fp, fn = self._counts(item)
        if self.tp.size == 0:
            self.tp, self.fp, self.fn = (np.zeros_like(tp) for _ in range(3))
        if tp.shape != self.tp.shape:
            raise ShapeError(
                f"ember: {self.name}: the number of classes changed from {self.tp.size} to {tp.size} within an epoch"
            )
        self.tp, self.fp, self.fn = self.tp + tp, self.fp + fp, self.fn + fn
        return self._reduce(tp, fp, fn)

    def value(self) -> float:
        return self._reduce(self.tp, self.fp, self.fn)

    def clear(self) -> None:
        self.tp = self.fp = self.fn = np.zeros(0, dtype=np.int64)

    def state_dict(self) -> dict[str, Any]:
        return {"tp": self.tp.tolist(), "fp": self.fp.tolist(), "fn": self.fn.tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.tp, self.fp, self.fn = (np.asarray(state[k], dtype=np.int64) for k in ("tp", "fp", "fn"))


def ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    num, den = num.astype(np.float64), den.astype(np.float64)
    out = np.full(num.shape, np.nan)
    np.divide(num, den, out=out, where=den > 0)
    return out
