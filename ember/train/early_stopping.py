"""Early stopping (Burn's ``MetricEarlyStoppingStrategy``): stop when a metric has not
improved for ``patience`` epochs."""

from __future__ import annotations

import math

from ember.errors import ConfigError
from ember.train.history import MetricHistory
from ember.train.metric.base import Direction, Metric, Split


def metric_name(op: str, metric: Metric | str) -> str:
    if isinstance(metric, Metric):
        return metric.name
    if isinstance(metric, str):
        return metric
    raise ConfigError(f"ember: {op}: expected a metric (e.g. LossMetric()) or its name, got {type(metric).__name__}")


def metric_direction(op: str, metric: Metric | str, direction: Direction | str | None) -> Direction:
    if direction is not None:
        return Direction.parse(direction)
    found = getattr(metric, "direction", None)
    if found is None:
        raise ConfigError(
            f"ember: {op}: say whether {metric_name(op, metric)!r} improves upward or downward: "
            "direction='lowest' or 'highest'"
        )
    return found


class EarlyStoppingStrategy:
    """Decides after each epoch whether to stop. Strategies read the epoch history,
    so a resumed training decides as the uninterrupted one would."""

    def should_stop(self, epoch: int, history: MetricHistory) -> bool:
        raise NotImplementedError

    def reason(self) -> str:
        return "early stopping"


class MetricEarlyStoppingStrategy(EarlyStoppingStrategy):
    """Stop when ``metric`` (in ``split``) has not improved by more than ``min_delta``
    for ``patience`` epochs; not before ``warmup_epochs``. ``direction`` defaults to
    the metric's own (lowest for a loss, highest for an accuracy).

    >>> from ember.train.metric import LossMetric
    >>> MetricEarlyStoppingStrategy(LossMetric(), patience=3).direction
    <Direction.LOWEST: 'lowest'>
    """

    def __init__(
        self,
        metric: Metric | str,
        patience: int,
        *,
        split: Split | str = Split.VALID,
        direction: Direction | str | None = None,
        min_delta: float = 0.0,
        warmup_epochs: int = 0,
    ):
        op = "MetricEarlyStoppingStrategy"
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ConfigError(f"ember: {op}: patience must be an int >= 1 (epochs), got {patience!r}")
        if not min_delta >= 0:
            raise ConfigError(f"ember: {op}: min_delta must be >= 0, got {min_delta}")
        self.name = metric_name(op, metric)
        self.patience = patience
        self.split = Split.parse(split)
        self.direction = metric_direction(op, metric, direction)
        self.min_delta = float(min_delta)
        self.warmup_epochs = int(warmup_epochs)
        self.best_epoch: int | None = None
        self.best_value = math.nan

    def _improves(self, value: float, best: float) -> bool:
        if self.direction is Direction.LOWEST:
            return value < best - self.min_delta
        return value > best + self.min_delta

    def should_stop(self, epoch: int, history: MetricHistory) -> bool:
        best_epoch, best_value = None, math.nan
        for e, value in history.series(self.name, self.split):
            if e > epoch or math.isnan(value):
                continue
            if best_epoch is None or self._improves(value, best_value):
                best_epoch, best_value = e, value
        self.best_epoch, self.best_value = best_epoch, best_value
        if best_epoch is None or epoch <= self.warmup_epochs:
            return False
        return epoch - best_epoch >= self.patience

    def reason(self) -> str:
        return (
            f"early stopping: {self.split.value} {self.name} has not improved for {self.patience} epochs "
            f"(best {self.best_value:.4g} at epoch {self.best_epoch})"
        )
