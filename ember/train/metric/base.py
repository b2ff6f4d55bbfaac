"""The metric protocol (Burn's ``Metric`` and ``Numeric``), what a metric is told
about each step (:class:`MetricMetadata`) and what it answers (:class:`MetricEntry`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from ember.errors import ConfigError, ShapeError


class Split(Enum):
    """Which loop a value comes from."""

    TRAIN = "train"
    VALID = "valid"

    @staticmethod
    def parse(value: Split | str) -> Split:
        if isinstance(value, Split):
            return value
        try:
            return Split(str(value).lower())
        except ValueError:
            raise ConfigError(f"ember: unknown split {value!r}; use 'train' or 'valid'") from None


class Direction(Enum):
    """Which way a metric improves."""

    LOWEST = "lowest"
    HIGHEST = "highest"

    @staticmethod
    def parse(value: Direction | str) -> Direction:
        if isinstance(value, Direction):
            return value
        try:
            return Direction(str(value).lower())
        except ValueError:
            raise ConfigError(f"ember: unknown direction {value!r}; use 'lowest' or 'highest'") from None

    def better(self, a: float, b: float) -> bool:
        """Whether ``a`` improves on ``b``."""
        return a < b if self is Direction.LOWEST else a > b


@dataclass(frozen=True)
class MetricMetadata:
    """Where a step happened: epoch (1-based), iteration (1-based within the epoch),
    the items it processed, and the learning rate (``None`` in validation)."""

    split: Split
    epoch: int
    num_epochs: int
    iteration: int
    num_iterations: int
    batch_size: int
    items_processed: int
    items_total: int
    lr: float | None = None


@dataclass(frozen=True)
class MetricEntry:
    """A metric after one step: ``current`` for this batch, ``value`` for the epoch so far."""

    name: str
    current: float
    value: float
    formatted: str


def format_value(value: float, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if unit == "%":
        return f"{value:.2f}%"
    magnitude = abs(value)
    text = f"{value:.4f}" if magnitude == 0 or 1e-3 <= magnitude < 1e6 else f"{value:.3e}"
    return f"{text} {unit}" if unit else text


class Metric:
    """A metric reads the item a step returns and keeps an epoch aggregate.

    Subclasses set ``name``, ``unit`` and ``direction`` (how it improves, or
    ``None``) and implement :meth:`update` (return the batch value), :meth:`value`
    (the epoch so far), :meth:`clear`, and the state methods used by checkpoints.
    """

    name: str = "Metric"
    unit: str = ""
    direction: Direction | None = None
    train_only: bool = False

    def update(self, item: ItemView, metadata: MetricMetadata) -> float:
        raise NotImplementedError

    def value(self) -> float:
        raise NotImplementedError

    def clear(self) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """The epoch aggregate as JSON-able values (to resume inside an epoch)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`."""

    def merge_states(self, states: list[dict[str, Any]]) -> dict[str, Any]:
        """One state from the states of several ranks (data-parallel training), so that
        the epoch value covers every rank's items. The default sums numbers and adds
        numeric lists element-wise (counts, totals, confusion counts); a metric whose
        state is a list of samples overrides it."""
        return sum_states(states)

    def format(self, value: float) -> str:
        return format_value(value, self.unit)

    def entry(self, current: float) -> MetricEntry:
        value = self.value()
        return MetricEntry(self.name, current, value, f"{self.name} {self.format(value)}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def sum_states(states: list[Any]) -> Any:
    """Numbers summed, lists summed element-wise, dicts merged key by key."""
    first = states[0]
    if isinstance(first, dict):
        return {key: sum_states([s[key] for s in states]) for key in first}
    if isinstance(first, (list, tuple)):
        return np.sum([np.asarray(s) for s in states], axis=0).tolist()
    if isinstance(first, bool) or first is None or isinstance(first, str):
        return first
    return sum(states)


class NumericMetricState:
    """A weighted running mean: ``sum(value * weight) / sum(weight)`` (Burn's
    ``NumericMetricState``); per-sample means weighted by their batch size give
    the per-sample mean over the epoch."""

    def __init__(self) -> None:
        self.total = 0.0
        self.weight = 0.0

    def update(self, value: float, weight: float) -> None:
        if not math.isnan(value):
            self.total += float(value) * weight
            self.weight += weight

    def value(self) -> float:
        return self.total / self.weight if self.weight else math.nan

    def reset(self) -> None:
        self.total = 0.0
        self.weight = 0.0

    def state_dict(self) -> dict[str, Any]:
        return {"total": self.total, "weight": self.weight}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.total = float(state["total"])
        self.weight = float(state["weight"])


class ItemView:
    """A step's output as metrics read it: fields by name (attribute or key),
    converted to numpy once and shared between metrics."""

    def __init__(self, item: Any):
        self.item = item
        self._arrays: dict[str, np.ndarray] = {}

    def has(self, field: str) -> bool:
        item = self.item
        return (isinstance(item, dict) and field in item) or hasattr(item, field)

    def raw(self, field: str, metric: str) -> Any:
        item = self.item
        if isinstance(item, dict) and field in item:
            return item[field]
        if hasattr(item, field):
            return getattr(item, field)
        raise ConfigError(
            f"ember: {metric}: the step returned {type(item).__name__}, which has no {field!r}; return an "
            "output that carries it (ClassificationOutput(loss, output, targets), RegressionOutput(...)) "
            "or register metrics that fit this output"
        )

    def array(self, field: str, metric: str) -> np.ndarray:
        if field not in self._arrays:
            value = self.raw(field, metric)
            self._arrays[field] = np.asarray(value.to_numpy() if hasattr(value, "to_numpy") else value)
        return self._arrays[field]

    def scalar(self, field: str, metric: str) -> float:
        array = self.array(field, metric)
        if array.size != 1:
            raise ShapeError(
                f"ember: {metric}: {field!r} must hold one value (a reduced loss), got shape {list(array.shape)}; "
                "reduce it with .mean()"
            )
        return float(array.reshape(-1)[0])


def class_targets(metric: str, output: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``output [..., C]`` and integer ``targets [...]`` flattened to ``[N, C]`` and ``[N]``."""
    if output.ndim < 1 or output.shape[:-1] != targets.shape:
        raise ShapeError(
            f"ember: {metric}: output {list(output.shape)} and targets {list(targets.shape)} do not fit; expected "
            "output [..., num_classes] (scores) and targets [...] (class indices)"
        )
    if targets.dtype.kind not in "iub":
        if targets.dtype.kind == "f" and np.all(np.mod(targets, 1) == 0):
            targets = targets.astype(np.int64)
        else:
            raise ShapeError(f"ember: {metric}: targets must be class indices (ints), got {targets.dtype}")
    return output.reshape(-1, output.shape[-1]), targets.reshape(-1).astype(np.int64)
