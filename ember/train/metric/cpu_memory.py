"""``CpuMemory``: the resident memory of the training process."""

from __future__ import annotations

import math
import os
import sys
from typing import Any

from ember.train.metric.base import ItemView, Metric, MetricMetadata


def resident_memory_bytes() -> float:
    """The process's resident set size (its peak where only that is available)."""
    try:
        with open("/proc/self/statm") as handle:
            return float(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return float(peak if sys.platform == "darwin" else peak * 1024)
    except (ImportError, OSError):  # pragma: no cover - Windows
        return math.nan


class CpuMemory(Metric):
    """Host memory used by this process, in MiB; the epoch value is the latest reading."""

    unit = "MiB"

    def __init__(self, name: str = "CPU Memory"):
        self.name = name
        self.last = math.nan

    def update(self, item: ItemView, metadata: MetricMetadata) -> float:
        self.last = resident_memory_bytes() / 2**20
        return self.last

    def value(self) -> float:
        return self.last

    def format(self, value: float) -> str:
        return "n/a" if math.isnan(value) else f"{value:.1f} MiB"

    def clear(self) -> None:
        self.last = math.nan

    def state_dict(self) -> dict[str, Any]:
        return {}
