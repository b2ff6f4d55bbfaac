"""``PlainRenderer``: one line at a time, for logs and CI (no terminal control codes)."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from ember.train.metric.base import MetricEntry
from ember.train.renderer.base import EpochReport, MetricsRenderer, TrainingInfo, TrainingProgress, format_eta


def _metrics(entries: list[MetricEntry]) -> str:
    return ", ".join(e.formatted for e in entries)


def epoch_line(report: EpochReport) -> str:
    """``epoch 2/10 done in 3.1s | train: Loss 0.31 | valid: Loss 0.35, Accuracy 90.10%``."""
    parts = [f"epoch {report.epoch}/{report.num_epochs} done in {report.duration:.2f}s"]
    if report.train:
        parts.append(f"train: {_metrics(report.train)}")
    if report.valid:
        parts.append(f"valid: {_metrics(report.valid)}")
    return " | ".join(parts)


class PlainRenderer(MetricsRenderer):
    """Prints about ``lines_per_epoch`` progress lines per epoch and split (and the
    last iteration), a line per finished epoch, notes, and the summary.

    A progress line reads ``[train] epoch 2/10 iter 40/100 (40%) | Loss 0.3127, Accuracy 91.20% | eta 01:05``
    (metric values are the running epoch averages)."""

    def __init__(self, stream: TextIO | None = None, lines_per_epoch: int = 10):
        self.stream = stream
        self.lines_per_epoch = max(int(lines_per_epoch), 1)

    def _print(self, text: str) -> None:
        stream = self.stream if self.stream is not None else sys.stdout
        print(text, file=stream, flush=True)

    def start(self, info: TrainingInfo) -> None:
        head = f"Training {info.model}" if info.model else "Training"
        details = [f"{info.num_params} params"] if info.num_params else []
        if info.device:
            details.append(f"on {info.device}")
        details.append(
            f"epochs {info.start_epoch}-{info.num_epochs}" if info.start_epoch > 1 else f"{info.num_epochs} epochs"
        )
        details.append(f"{info.train_iterations} train / {info.valid_iterations} valid iterations per epoch")
        self._print(f"{head} ({', '.join(details)})")
        if info.artifact_dir:
            self._print(f"Artifacts: {info.artifact_dir}")

    def update(self, progress: TrainingProgress, entries: list[MetricEntry]) -> None:
        every = max(progress.num_iterations // self.lines_per_epoch, 1)
        if progress.iteration % every and progress.iteration != progress.num_iterations:
            return
        percent = 100 * progress.iteration // max(progress.num_iterations, 1)
        line = (
            f"[{progress.split.value}] epoch {progress.epoch}/{progress.num_epochs} "
            f"iter {progress.iteration}/{progress.num_iterations} ({percent}%)"
        )
        if entries:
            line += f" | {_metrics(entries)}"
        self._print(f"{line} | eta {format_eta(progress.eta)}")

    def epoch_end(self, report: EpochReport) -> None:
        self._print(epoch_line(report))

    def message(self, text: str) -> None:
        self._print(text)

    def end(self, summary: Any | None) -> None:
        if summary is not None:
            self._print(str(summary))
