"""``LearnerSummary``: the metrics of a finished training at a glance."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ember.train.history import MetricHistory


@dataclass
class MetricSummary:
    split: str
    name: str
    final: float
    min: float
    min_epoch: int
    max: float
    max_epoch: int


@dataclass
class LearnerSummary:
    """Per metric and split: the last epoch's value and the min and max with their
    epochs (Burn's ``LearnerSummary``). ``str(summary)`` is a table."""

    epochs: int
    duration: float
    metrics: list[MetricSummary] = field(default_factory=list)
    model: str = ""
    stopped: str = ""

    @staticmethod
    def from_history(
        history: MetricHistory, names: list[str], duration: float, model: str = "", stopped: str = ""
    ) -> LearnerSummary:
        epochs = history.epochs()
        summary = LearnerSummary(epochs[-1] if epochs else 0, duration, model=model, stopped=stopped)
        for split in ("train", "valid"):
            for name in names:
                points = [(e, v) for e, v in history.series(name, split) if not math.isnan(v)]
                if not points:
                    continue
                low = min(points, key=lambda p: p[1])
                high = max(points, key=lambda p: p[1])
                summary.metrics.append(MetricSummary(split, name, points[-1][1], low[1], low[0], high[1], high[0]))
        return summary

    def get(self, name: str, split: str = "valid") -> MetricSummary | None:
        for m in self.metrics:
            if m.name == name and m.split == split:
                return m
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "epochs": self.epochs,
            "duration": self.duration,
            "model": self.model,
            "stopped": self.stopped,
            "metrics": [m.__dict__ for m in self.metrics],
        }

    def __str__(self) -> str:
        minutes, seconds = divmod(self.duration, 60.0)
        lines = ["Learner Summary", f"Epochs: {self.epochs}    Duration: {int(minutes)}m {seconds:.2f}s"]
        if self.stopped:
            lines.append(f"Stopped: {self.stopped}")
        header = ("Split", "Metric", "Final", "Min.", "Epoch", "Max.", "Epoch")
        rows = [
            (
                m.split.capitalize(),
                m.name,
                f"{m.final:.4f}",
                f"{m.min:.4f}",
                str(m.min_epoch),
                f"{m.max:.4f}",
                str(m.max_epoch),
            )
            for m in self.metrics
        ]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

        def line(cells):
            return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

        lines += [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in rows]
        return "\n".join(lines)
