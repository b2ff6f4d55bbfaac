"""Which epoch checkpoints to keep (Burn's ``CheckpointingStrategy``): the last N, the
best by a metric, or the union of several strategies."""

from __future__ import annotations

from ember.errors import ConfigError
from ember.train.early_stopping import metric_direction, metric_name
from ember.train.history import MetricHistory
from ember.train.metric.base import Direction, Metric, Split


class CheckpointingStrategy:
    """``keep(epochs, history)`` returns the epochs (among those checkpointed) to keep."""

    def keep(self, epochs: list[int], history: MetricHistory) -> set[int]:
        raise NotImplementedError

    def metrics(self) -> list[tuple[str, Split]]:
        """The ``(metric name, split)`` pairs the strategy reads."""
        return []


class KeepLastNCheckpoints(CheckpointingStrategy):
    """Keep the checkpoints of the last ``n`` epochs."""

    def __init__(self, n: int):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"ember: KeepLastNCheckpoints: n must be an int >= 1, got {n!r}")
        self.n = n

    def keep(self, epochs: list[int], history: MetricHistory) -> set[int]:
        return set(sorted(epochs)[-self.n :])

    def __repr__(self) -> str:
        return f"KeepLastNCheckpoints({self.n})"


class MetricCheckpointingStrategy(CheckpointingStrategy):
    """Keep the checkpoint of the epoch with the best value of ``metric`` in ``split``
    (the earliest on ties); ``direction`` defaults to the metric's own."""

    def __init__(
        self, metric: Metric | str, split: Split | str = Split.VALID, direction: Direction | str | None = None
    ):
        self.name = metric_name("MetricCheckpointingStrategy", metric)
        self.split = Split.parse(split)
        self.direction = metric_direction("MetricCheckpointingStrategy", metric, direction)

    def keep(self, epochs: list[int], history: MetricHistory) -> set[int]:
        found = [(e, history.find(self.name, e, self.split)) for e in epochs]
        candidates = [(e, v) for e, v in found if v is not None and v == v]
        best: tuple[int, float] | None = None
        for e, v in sorted(candidates):
            if best is None or self.direction.better(v, best[1]):
                best = (e, v)
        return {best[0]} if best else set()

    def metrics(self) -> list[tuple[str, Split]]:
        return [(self.name, self.split)]

    def __repr__(self) -> str:
        return f"MetricCheckpointingStrategy({self.name!r}, {self.split.value}, {self.direction.value})"


class ComposedCheckpointingStrategy(CheckpointingStrategy):
    """Keeps an epoch if any of its strategies keeps it (Burn deletes only when all agree)."""

    def __init__(self, *strategies: CheckpointingStrategy):
        for s in strategies:
            if not isinstance(s, CheckpointingStrategy):
                raise ConfigError(f"ember: ComposedCheckpointingStrategy: expected strategies, got {type(s).__name__}")
        self.strategies = list(strategies)

    def keep(self, epochs: list[int], history: MetricHistory) -> set[int]:
        kept: set[int] = set()
        for strategy in self.strategies:
            kept |= strategy.keep(epochs, history)
        return kept

    def metrics(self) -> list[tuple[str, Split]]:
        return [m for s in self.strategies for m in s.metrics()]

    def __repr__(self) -> str:
        return f"ComposedCheckpointingStrategy({', '.join(map(repr, self.strategies))})"
