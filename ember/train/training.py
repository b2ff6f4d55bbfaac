"""``SupervisedTraining``: the training setup in Burn's builder shape."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ember.errors import ConfigError
from ember.train.checkpoint import (
    CheckpointingStrategy,
    ComposedCheckpointingStrategy,
    KeepLastNCheckpoints,
    MetricCheckpointingStrategy,
)
from ember.train.early_stopping import EarlyStoppingStrategy, MetricEarlyStoppingStrategy
from ember.train.interrupter import Interrupter
from ember.train.logger import FileMetricLogger
from ember.train.metric.base import Metric, Split
from ember.train.metric.loss import LossMetric
from ember.train.metrics_group import MetricGroup
from ember.train.renderer import MetricsRenderer
from ember.train.tensorboard import TensorBoardLogger

if TYPE_CHECKING:
    from ember.data import DataLoader
    from ember.module import Module
    from ember.train.learner import Learner
    from ember.train.result import TrainingResult


def _count(op: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"ember: SupervisedTraining.{op}: expected an int >= {minimum}, got {value!r}")
    return value


class SupervisedTraining:
    """How to train: metrics, epochs, checkpoints, early stopping, what to show and log.

    ``artifact_dir`` receives the metric logs (``logs/``), plots (``plots/``),
    checkpoints (``checkpoint/``), ``experiment.log`` and ``summary.json``; without
    it nothing is written. A fit on a directory that holds checkpoints resumes
    from the latest one. A split without registered metrics shows its loss
    (``LossMetric``). Every method returns the builder.

    >>> training = (SupervisedTraining("runs/digits")
    ...     .metric_train_numeric(LossMetric()).metric_valid_numeric(LossMetric())
    ...     .metric_valid_numeric(AccuracyMetric())
    ...     .num_epochs(10)
    ...     .early_stopping(LossMetric(), patience=3)
    ...     .summary())  # doctest: +SKIP
    >>> model, summary = training.launch(Learner(model, optim, 1e-3), train_loader, valid_loader)  # doctest: +SKIP
    """

    def __init__(self, artifact_dir: str | os.PathLike | None = None):
        self.artifact_dir = None if artifact_dir is None else Path(artifact_dir)
        self.train_metrics = MetricGroup(Split.TRAIN)
        self.valid_metrics = MetricGroup(Split.VALID)
        self._num_epochs = 1
        self._grads_accumulation: int | None = None
        self._checkpoint: int | None = None
        self._checkpointing = True
        self._strategy: CheckpointingStrategy | None = None
        self._early_stopping: EarlyStoppingStrategy | None = None
        self._logger: FileMetricLogger | str = "csv"
        self._renderer: Any = "auto"
        self._plots = True
        self._tensorboard: TensorBoardLogger | None = None
        self._summary = False
        self._interrupter = Interrupter()
        self._learning_strategy: Any = None

    # ------------------------------------------------------------------ metrics
    def metric_train(self, metric: Metric) -> SupervisedTraining:
        """A training metric, shown and logged."""
        self.train_metrics.add(metric, numeric=False)
        return self

    def metric_valid(self, metric: Metric) -> SupervisedTraining:
        """A validation metric, shown and logged."""
        self.valid_metrics.add(metric, numeric=False)
        return self

    def metric_train_numeric(self, metric: Metric) -> SupervisedTraining:
        """A training metric that is also plotted and summarised."""
        self.train_metrics.add(metric, numeric=True)
        return self

    def metric_valid_numeric(self, metric: Metric) -> SupervisedTraining:
        """A validation metric that is also plotted and summarised."""
        self.valid_metrics.add(metric, numeric=True)
        return self

    def metrics(self, *metrics: Metric) -> SupervisedTraining:
        """Each metric as a numeric metric of both splits (training only for those
        that exist only in training, such as the learning rate)."""
        for metric in metrics:
            self.metric_train_numeric(metric)
            if not metric.train_only:
                self.metric_valid_numeric(copy.deepcopy(metric))
        return self

    # ------------------------------------------------------------------ loop
    def num_epochs(self, num_epochs: int) -> SupervisedTraining:
        self._num_epochs = _count("num_epochs", num_epochs)
        return self

    def grads_accumulation(self, accumulation: int) -> SupervisedTraining:
        """Sum the gradients of ``accumulation`` batches before each optimizer step
        (like a batch that many times larger; the learning rate is not scaled). An
        epoch's leftover batches make a last, smaller step."""
        self._grads_accumulation = _count("grads_accumulation", accumulation)
        return self

    def checkpoint(self, epoch: int) -> SupervisedTraining:
        """Resume from the checkpoint of the end of ``epoch`` instead of the latest one."""
        self._checkpoint = _count("checkpoint", epoch)
        return self

    def checkpointing(self, enabled: bool = True) -> SupervisedTraining:
        """Turn checkpoints (and resuming) on or off; on by default with an artifact directory."""
        self._checkpointing = bool(enabled)
        return self

    def with_checkpointing_strategy(self, strategy: CheckpointingStrategy) -> SupervisedTraining:
        """Which epoch checkpoints to keep. The default keeps the last 2 and the best by
        validation loss (when a validation LossMetric is registered)."""
        if not isinstance(strategy, CheckpointingStrategy):
            raise ConfigError(
                "ember: with_checkpointing_strategy: expected KeepLastNCheckpoints(n), "
                f"MetricCheckpointingStrategy(metric) or ComposedCheckpointingStrategy(...), got {type(strategy).__name__}"
            )
        self._strategy = strategy
        return self

    def early_stopping(
        self, strategy: EarlyStoppingStrategy | Metric | str, patience: int | None = None, **options: Any
    ) -> SupervisedTraining:
        """Stop when a metric stops improving: ``early_stopping(LossMetric(), patience=3)``
        (validation split, the metric's direction; see
        :class:`~ember.train.MetricEarlyStoppingStrategy` for the options), or any
        :class:`~ember.train.EarlyStoppingStrategy`."""
        if isinstance(strategy, EarlyStoppingStrategy):
            if patience is not None or options:
                raise ConfigError(
                    "ember: early_stopping: give either a strategy or a metric with patience=..., not both"
                )
            self._early_stopping = strategy
        else:
            if patience is None:
                raise ConfigError(
                    "ember: early_stopping(metric, patience): say after how many epochs without "
                    "improvement to stop, e.g. early_stopping(LossMetric(), patience=3)"
                )
            self._early_stopping = MetricEarlyStoppingStrategy(strategy, patience, **options)
        return self

    def learning_strategy(self, strategy: Any) -> SupervisedTraining:
        """Where the training runs (Burn's ``learning_strategy``): ``SingleDevice()``
        (the default) or ``ember.distributed.DataParallel()``, data parallel over the
        ranks of an ``mpiexec`` launch. A ``strategy`` given to the Learner wins."""
        from ember.train.parallel import make_strategy

        make_strategy(strategy)  # validates now
        self._learning_strategy = strategy
        return self

    # ------------------------------------------------------------------ output
    def with_metric_logger(self, logger: FileMetricLogger | str) -> SupervisedTraining:
        """``"csv"`` (the default), ``"jsonl"``, or a :class:`FileMetricLogger`."""
        if isinstance(logger, str) and logger not in ("csv", "jsonl"):
            raise ConfigError(
                f"ember: with_metric_logger: expected 'csv', 'jsonl' or a FileMetricLogger, got {logger!r}"
            )
        if not isinstance(logger, (str, FileMetricLogger)):
            raise ConfigError(
                f"ember: with_metric_logger: expected 'csv', 'jsonl' or a FileMetricLogger, got {logger!r}"
            )
        self._logger = logger
        return self

    def renderer(self, renderer: MetricsRenderer | str) -> SupervisedTraining:
        """``"auto"`` (the dashboard in a terminal, plain lines otherwise),
        ``"dashboard"``, ``"plain"``, ``"none"`` or a :class:`MetricsRenderer`."""
        from ember.train.renderer import make_renderer

        if not isinstance(renderer, MetricsRenderer):
            make_renderer(renderer)  # validates the name now
        self._renderer = renderer
        return self

    def logger_tensorboard(
        self,
        log_dir: str | os.PathLike | None = None,
        histograms_every: int | None = 1,
        steps_every: int | None = 10,
    ) -> SupervisedTraining:
        """Also write TensorBoard event files (needs tensorboardX, in ``ember[train]``)
        to ``log_dir`` (default ``<artifact_dir>/tensorboard``): every metric's epoch
        value, train and valid (``train/Loss``, ``valid/Accuracy``: step = the epoch);
        every ``steps_every``-th step's values (``train_step/Loss``: step = the step's
        index over the run; ``None``: epochs only); the learning rate (``train/lr``,
        ``train_step/lr``); a histogram of each parameter every ``histograms_every``
        epochs (``params/<path>``; ``None``: none). See :class:`TensorBoardLogger`.
        ``tensorboard --logdir runs/demo/tensorboard`` shows them."""
        self._tensorboard = TensorBoardLogger(log_dir, histograms_every=histograms_every, steps_every=steps_every)
        return self

    def plots(self, enabled: bool = True) -> SupervisedTraining:
        """PNG plots of the numeric metrics after each epoch (needs matplotlib), drawn
        on a thread of their own (see :class:`~ember.train.plot.BackgroundPlotter`)."""
        self._plots = bool(enabled)
        return self

    def summary(self) -> SupervisedTraining:
        """Show the summary table when the training ends."""
        self._summary = True
        return self

    def interrupter(self) -> Interrupter:
        """The handle that stops this training cleanly (``interrupter().stop()``)."""
        return self._interrupter

    def with_interrupter(self, interrupter: Interrupter) -> SupervisedTraining:
        self._interrupter = interrupter
        return self

    # ------------------------------------------------------------------ run
    def checkpointing_strategy(self, validates: bool = True) -> CheckpointingStrategy:
        """The strategy given, or the default: the last 2 epochs and, when the training
        ``validates`` with a LossMetric, the best epoch by validation loss."""
        if self._strategy is not None:
            return self._strategy
        strategies: list[CheckpointingStrategy] = [KeepLastNCheckpoints(2)]
        if validates and any(isinstance(m, LossMetric) for m in self.valid_metrics.metrics):
            loss = next(m for m in self.valid_metrics.metrics if isinstance(m, LossMetric))
            strategies.append(MetricCheckpointingStrategy(loss, Split.VALID))
        return ComposedCheckpointingStrategy(*strategies)

    def build(self, model: Module, optim: Any, lr_scheduler: Any, **steps: Any) -> Learner:
        """A :class:`Learner` that trains with this setup when ``fit`` is called."""
        from ember.train.learner import Learner

        return Learner(model, optim, lr_scheduler, training=self, **steps)

    def launch(
        self, learner: Learner, train_loader: DataLoader, valid_loader: DataLoader | None = None
    ) -> TrainingResult:
        """Trains ``learner`` (Burn's ``launch``); ``learner.model`` is updated too."""
        from ember.train.loop import TrainingRun

        return TrainingRun(self, learner, train_loader, valid_loader).run()
