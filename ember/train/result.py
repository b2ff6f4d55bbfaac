"""``TrainingResult``: what ``fit`` returns."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ember.module import Module
from ember.train.history import MetricHistory
from ember.train.summary import LearnerSummary


@dataclass
class TrainingResult:
    """The trained ``model`` (on the training device; ``model.valid()`` for
    inference), the ``summary``, the epoch ``history``, and how the run ended.
    Unpacks as ``model, summary = learner.fit(...)``."""

    model: Module
    summary: LearnerSummary
    history: MetricHistory
    epochs: int
    interrupted: bool = False
    stopped_early: bool = False
    checkpoint: Path | None = None

    def __iter__(self) -> Iterator[Any]:
        yield self.model
        yield self.summary
