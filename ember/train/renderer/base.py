"""The renderer protocol (Burn's ``MetricsRenderer``): what the user sees while training."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ember.train.metric.base import MetricEntry, Split


@dataclass(frozen=True)
class TrainingInfo:
    """Told once when ``fit`` starts."""

    num_epochs: int
    start_epoch: int
    train_iterations: int
    valid_iterations: int
    model: str = ""
    num_params: int = 0
    device: str = ""
    artifact_dir: str | None = None


@dataclass(frozen=True)
class TrainingProgress:
    """After each step: where the loop is and, if known, the seconds left for the
    whole fit (``eta``)."""

    split: Split
    epoch: int
    num_epochs: int
    iteration: int
    num_iterations: int
    items_processed: int
    items_total: int
    eta: float | None = None


@dataclass(frozen=True)
class EpochReport:
    """After each epoch: its duration and the epoch value of every metric."""

    epoch: int
    num_epochs: int
    duration: float
    train: list[MetricEntry] = field(default_factory=list)
    valid: list[MetricEntry] = field(default_factory=list)


class MetricsRenderer:
    """Receives the training's events; every hook does nothing by default."""

    def start(self, info: TrainingInfo) -> None:
        """``fit`` starts (after resuming, if it resumes)."""

    def update(self, progress: TrainingProgress, entries: list[MetricEntry]) -> None:
        """A step finished; ``entries`` hold the batch and running epoch values."""

    def epoch_end(self, report: EpochReport) -> None:
        """An epoch (training and validation) finished."""

    def message(self, text: str) -> None:
        """A note for the user (resumed, interrupted, checkpoint saved, ...)."""

    def end(self, summary: Any | None) -> None:
        """``fit`` ends; ``summary`` is shown when the builder asked for it."""

    def close(self) -> None:
        """Releases the terminal (also on errors)."""


def format_eta(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:
        return "--:--"
    seconds = max(round(seconds), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"
