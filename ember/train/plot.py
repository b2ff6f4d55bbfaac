"""PNG plots of the epoch values, one per metric (needs matplotlib, the ``plot`` extra)."""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from ember.module.atomic import atomic_write
from ember.train.history import MetricHistory


def matplotlib_available() -> bool:
    """Whether matplotlib is installed; it is imported by the plotter's thread when it
    draws (an import of about 0.3 s that the training thread does not wait for)."""
    try:
        return importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):
        return False


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


class BackgroundPlotter:
    """Draws :func:`plot_history` on its own thread, so the training thread only
    hands over a copy of the history (:meth:`submit`, microseconds). One drawing
    runs at a time and a newer history replaces one not yet drawn. After a drawing
    of ``d`` seconds the thread rests ``(1 / share - 1) * d`` seconds before the next,
    so that drawing (which holds Python's GIL for much of its time) takes at most
    ``share`` of the run's time; the first drawing waits ``first_delay`` seconds from
    the plotter's start (a first drawing costs about 0.3 s of CPU, matplotlib's import
    and fonts included: a run that ends sooner draws its plots once, at the end).
    :meth:`close` draws the last history at once and waits for it; it returns the first
    error a drawing raised (``None`` if none)."""

    def __init__(
        self,
        directory: str | os.PathLike,
        names: list[str],
        units: dict[str, str],
        share: float = 0.05,
        first_delay: float = 5.0,
    ) -> None:
        self.directory = Path(directory)
        self.names = list(names)
        self.units = dict(units)
        self.rest_factor = 1.0 / share - 1.0
        self.busy = 0.0  # seconds spent drawing
        self.drawn = 0  # drawings done
        self._cond = threading.Condition()
        self._pending: MetricHistory | None = None
        self._closing = False
        self._error: BaseException | None = None
        self._first = time.monotonic() + first_delay
        self._thread = threading.Thread(target=self._run, name="ember-plots", daemon=True)
        self._thread.start()

    def submit(self, history: MetricHistory) -> None:
        snapshot = MetricHistory.from_dict(history.to_dict())
        with self._cond:
            self._pending = snapshot
            self._cond.notify()

    def _next(self, rest_until: float) -> MetricHistory | None:
        with self._cond:
            while True:
                if self._pending is not None and (self._closing or time.monotonic() >= rest_until):
                    snapshot, self._pending = self._pending, None
                    return snapshot
                if self._closing:
                    return None
                timeout = None if self._pending is None else max(0.0, rest_until - time.monotonic())
                self._cond.wait(timeout)

    def _run(self) -> None:
        rest_until = self._first
        while (snapshot := self._next(rest_until)) is not None:
            started = time.perf_counter()
            try:
                plot_history(snapshot, self.directory, self.names, self.units)
            except Exception as error:  # reported by close()
                self._error = self._error or error
            took = time.perf_counter() - started
            self.busy += took
            self.drawn += 1
            rest_until = time.monotonic() + self.rest_factor * took

    def close(self) -> BaseException | None:
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()
        return self._error
