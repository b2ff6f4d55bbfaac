"""``TensorBoardLogger``: the Learner's metrics, learning rate and parameter
histograms as TensorBoard event files, written with ``tensorboardX`` (the ``train``
extra; imported only when a training asks for TensorBoard)."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from ember.errors import ConfigError

#: The tag of the learning rate (per epoch: the last step's rate).
LR_TAG = "train/lr"


def tag(split: str, name: str, step: bool = False) -> str:
    """The tag of a metric: ``"train/Loss"`` for the epoch value, ``"train_step/Loss"``
    for the values of single steps; characters TensorBoard refuses become ``_``
    (``"Learning Rate"`` is tagged ``"Learning_Rate"``)."""
    clean = re.sub(r"[^-\w.]+", "_", name).strip("_") or "metric"
    return f"{split}{'_step' if step else ''}/{clean}"


def _summary_writer() -> Any:
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        raise ImportError(
            "ember: SupervisedTraining.logger_tensorboard needs tensorboardX: pip install tensorboardX "
            "(or ember[train]); view the files with TensorBoard (pip install tensorboard)"
        ) from None
    return SummaryWriter


def _count(op: str, value: Any, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"ember: logger_tensorboard: {op} must be an int >= 1{' or None (never)' if allow_none else ''}, "
            f"got {value!r}"
        )
    return value


class TensorBoardLogger:
    """Writes event files to ``log_dir`` (``None``: ``<artifact_dir>/tensorboard``):

    - ``train/<metric>`` and ``valid/<metric>``: each metric's epoch value (step = the epoch);
    - ``train_step/<metric>`` and ``valid_step/<metric>``: the value of every
      ``steps_every``-th step (step = the step's index counted over the whole run),
      ``None`` for epoch values only;
    - ``train/lr`` (per epoch) and ``train_step/lr``: the learning rate;
    - ``params/<path>``: a histogram of every parameter each ``histograms_every``
      epochs (``None`` for none).

    A resumed training appends to the same directory (TensorBoard merges the files)."""

    def __init__(
        self,
        log_dir: str | os.PathLike | None,
        histograms_every: int | None = 1,
        steps_every: int | None = 10,
        flush_secs: int = 30,
    ):
        self.log_dir = None if log_dir is None else Path(log_dir)
        self.histograms_every = _count("histograms_every", histograms_every, allow_none=True)
        self.steps_every = _count("steps_every", steps_every, allow_none=True)
        self.flush_secs = _count("flush_secs", flush_secs)
        self._writer: Any = None
        _summary_writer()  # a missing tensorboardX is an error when the training is set up

    def start(self) -> None:
        if self.log_dir is None:
            raise ConfigError("ember: TensorBoardLogger: no log_dir")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._writer = _summary_writer()(logdir=str(self.log_dir), flush_secs=self.flush_secs)

    def _scalar(self, name: str, value: Any, step: int) -> None:
        if value is None:
            return
        value = float(value)
        if not math.isnan(value):
            self._writer.add_scalar(name, value, step)

    def log_step(self, split: str, global_step: int, values: dict[str, float], lr: float | None = None) -> None:
        """The values of one step; written when ``global_step`` (1-based) is a multiple of ``steps_every``."""
        if self._writer is None or self.steps_every is None or global_step % self.steps_every:
            return
        for name, value in values.items():
            self._scalar(tag(split, name, step=True), value, global_step)
        if lr is not None:
            self._scalar(tag(split, "lr", step=True), lr, global_step)

    def log_epoch(self, epoch: int, values: dict[str, dict[str, float]], lr: float | None, model: Any) -> None:
        """The epoch values by split, the learning rate and, every ``histograms_every``
        epochs, the parameter histograms; then the file is flushed."""
        if self._writer is None:
            return
        for split, named in values.items():
            for name, value in named.items():
                self._scalar(tag(split, name), value, epoch)
        if lr is not None:
            self._scalar(LR_TAG, lr, epoch)
        if self.histograms_every is not None and epoch % self.histograms_every == 0:
            for path, param in model.named_params():
                array = np.asarray(param.val().to_numpy()).astype(np.float32, copy=False)
                if array.size and np.isfinite(array).all():
                    self._writer.add_histogram(f"params/{path}", array, epoch)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
