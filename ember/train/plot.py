"""PNG plots of the epoch values, one per metric (needs matplotlib, the ``plot`` extra)."""

from __future__ import annotations

import functools
import math
import os
import re
from pathlib import Path
from typing import Any

from ember.module.atomic import atomic_write
from ember.train.history import MetricHistory


def matplotlib_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def file_name(metric: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", metric).strip("_") or "metric"


def _save_png(figure: Any, path: str) -> None:
    figure.savefig(path, format="png")


def plot_history(
    history: MetricHistory, directory: str | os.PathLike, names: list[str], units: dict[str, str]
) -> list[Path]:
    """Writes ``<directory>/<metric>.png`` with the train and valid curves over the
    epochs for each of ``names``; returns the files written. Uses matplotlib's
    object API (no pyplot, no global backend change)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names:
        figure = Figure(figsize=(6.0, 4.0), dpi=100)
        FigureCanvasAgg(figure)
        axes = figure.add_subplot(1, 1, 1)
        drawn = False
        for split, style in (("train", "-o"), ("valid", "-s")):
            points = [(e, v) for e, v in history.series(name, split) if not math.isnan(v)]
            if points:
                epochs, values = zip(*points)
                axes.plot(epochs, values, style, label=split, markersize=3)
                drawn = True
        if not drawn:
            continue
        unit = units.get(name, "")
        axes.set_title(name)
        axes.set_xlabel("epoch")
        axes.set_ylabel(f"{name} ({unit})" if unit else name)
        axes.grid(True, alpha=0.3)
        axes.legend()
        locator = axes.xaxis.get_major_locator()
        if isinstance(locator, MaxNLocator):  # the default AutoLocator is one
            locator.set_params(integer=True)
        figure.subplots_adjust(left=0.13, right=0.97, top=0.92, bottom=0.12)
        path = directory / f"{file_name(name)}.png"
        atomic_write(path, functools.partial(_save_png, figure))
        written.append(path)
    return written
