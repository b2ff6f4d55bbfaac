"""``TrainingRun``: one ``fit`` of a :class:`~ember.train.Learner`, on one device or data
parallel over ranks (see :mod:`ember.train.parallel`), with resuming, checkpoints,
logs, plots and early stopping."""

from __future__ import annotations

import copy
import json
import logging
import time
from pathlib import Path
from typing import Any

from ember.data import DataLoader
from ember.device import Device
from ember.errors import ConfigError, DeviceError, RecordError
from ember.module.config import atomic_write_text
from ember.optim import GradientsAccumulator
from ember.train.checkpoint import CheckpointPosition, FileCheckpointer
from ember.train.early_stopping import MetricEarlyStoppingStrategy
from ember.train.history import MetricHistory
from ember.train.learner import Learner
from ember.train.logger import FileMetricLogger
from ember.train.metric.base import MetricMetadata, Split
from ember.train.metric.loss import LossMetric
from ember.train.metrics_group import MetricGroup
from ember.train.parallel import make_strategy
from ember.train.plot import BackgroundPlotter, matplotlib_available
from ember.train.renderer import EpochReport, MetricsRenderer, TrainingInfo, TrainingProgress, make_renderer
from ember.train.renderer.plain import epoch_line
from ember.train.result import TrainingResult
from ember.train.run_checkpoints import apply_strategy, resume, save_checkpoint
from ember.train.summary import LearnerSummary
from ember.train.tensorboard import TensorBoardLogger

log = logging.getLogger("ember.train")


def training_device(model: Any, loader: DataLoader) -> Device:
    devices = model.devices()
    if len(devices) > 1:
        raise DeviceError(
            f"ember: Learner.fit: the model's parameters live on several devices ({', '.join(map(repr, devices))}); "
            "move it to one with model.to_device(device)"
        )
    device = devices[0] if devices else loader.device
    if not device.is_autodiff():
        raise DeviceError(
            f"ember: Learner.fit: the model's parameters live on {device!r}, which does not track gradients; "
            f"build the model on {device!r}.autodiff() (validation runs on model.valid())"
        )
    return device


def _check_loader(name: str, loader: Any) -> None:
    if not isinstance(loader, DataLoader):
        raise ConfigError(
            f"ember: Learner.fit: {name} must be a DataLoader (DataLoaderBuilder(batcher)...build(dataset)), "
            f"got {type(loader).__name__}"
        )


class TrainingRun:
    def __init__(self, training: Any, learner: Learner, train_loader: DataLoader, valid_loader: DataLoader | None):
        if not isinstance(learner, Learner):
            raise ConfigError(
                f"ember: launch: expected a Learner(model, optim, lr_scheduler), got {type(learner).__name__}"
            )
        _check_loader("train_loader", train_loader)
        if valid_loader is not None:
            _check_loader("valid_loader", valid_loader)
        if len(train_loader) == 0:
            raise ConfigError("ember: Learner.fit: the training loader yields no batches (is the dataset empty?)")
        self.training = training
        self.learner = learner
        self.model = learner.model
        self.device = training_device(self.model, train_loader)
        strategy = learner.strategy if learner.strategy is not None else training._learning_strategy
        self.parallel = make_strategy(strategy)
        self.main = self.parallel.is_main
        self.train_loader = self.parallel.shard(train_loader.to_device(self.device), train=True)
        self.valid_loader = (
            None
            if valid_loader is None
            else self.parallel.shard(valid_loader.to_device(self.device.inner()), train=False)
        )
        self.num_epochs = training._num_epochs
        self.train_group = self._group(training.train_metrics, Split.TRAIN)
        self.valid_group = (
            self._group(training.valid_metrics, Split.VALID)
            if self.valid_loader is not None
            else MetricGroup(Split.VALID)
        )
        self.interrupter = training._interrupter
        self.artifact_dir = training.artifact_dir
        self.checkpointer: FileCheckpointer | None = None
        if self.artifact_dir is not None and training._checkpointing:
            self.checkpointer = FileCheckpointer(self.artifact_dir / "checkpoint")
        self.strategy = training.checkpointing_strategy(validates=self.valid_loader is not None)
        self.early_stopping = training._early_stopping
        self._check_metric_references()
        self.history = MetricHistory()
        self.elapsed_before = 0.0
        self.last_checkpoint: Path | None = None
        self._verified: CheckpointPosition | None = None  # the checkpoint _newest_intact just verified
        self._resume_state: dict | None = None
        self._lr_of_epoch = 0.0  # the current epoch's rate under lr_step="epoch"
        self.interrupted = False
        self.stopped = ""
        self._seconds: dict[Split, list[float]] = {Split.TRAIN: [], Split.VALID: []}
        self._plot_note = False
        self._plotter: BackgroundPlotter | None = None
        self._last_lr: float | None = None  # the rate of the latest training step
        self._interrupt_noted = False

    @staticmethod
    def _group(group: MetricGroup, split: Split) -> MetricGroup:
        if group.metrics:
            return group
        default = MetricGroup(split)
        default.add(LossMetric(), numeric=True)
        return default

    def _check_metric_references(self) -> None:
        refs = list(self.strategy.metrics() if self.checkpointer is not None else [])
        if isinstance(self.early_stopping, MetricEarlyStoppingStrategy):
            refs.append((self.early_stopping.name, self.early_stopping.split))
        for name, split in refs:
            group = self.train_group if split is Split.TRAIN else self.valid_group
            if name not in group.names():
                where = (
                    "no valid loader was given"
                    if split is Split.VALID and self.valid_loader is None
                    else (f"the {split.value} metrics are {', '.join(group.names()) or 'none'}")
                )
                raise ConfigError(
                    f"ember: SupervisedTraining: early stopping or checkpointing reads the {split.value} metric "
                    f"{name!r}, but {where}; register it with metric_{split.value}_numeric(...)"
                )

    # ------------------------------------------------------------------ notes
    def note(self, text: str) -> None:
        log.info(text)
        self.renderer.message(text)

    # ------------------------------------------------------------------ run
    def run(self) -> TrainingResult:
        self.renderer = make_renderer(self.training._renderer if self.main else "none")
        # Each step's progress (and its time estimate) is built only for a renderer that shows steps.
        self._renders_steps = type(self.renderer).update is not MetricsRenderer.update
        self.logger: FileMetricLogger | None = None
        self.tensorboard: TensorBoardLogger | None = None
        handler = None
        started = self._run_started = time.perf_counter()
        try:
            if self.artifact_dir is not None and self.main:
                self.artifact_dir.mkdir(parents=True, exist_ok=True)
                handler = logging.FileHandler(self.artifact_dir / "experiment.log")
                handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
                log.addHandler(handler)
                log.setLevel(logging.INFO)
            position = resume(self)
            self.model = self.parallel.prepare_model(self.model)
            self._start_logger(position)
            self._start_tensorboard()
            self.renderer.start(
                TrainingInfo(
                    num_epochs=self.num_epochs,
                    start_epoch=self._start_epoch(position),
                    train_iterations=len(self.train_loader),
                    valid_iterations=0 if self.valid_loader is None else len(self.valid_loader),
                    model=type(self.model).__name__,
                    num_params=self.model.num_params(),
                    device=repr(self.device)
                    + (f" x {self.parallel.world_size} ranks" if self.parallel.world_size > 1 else ""),
                    artifact_dir=None if self.artifact_dir is None else str(self.artifact_dir),
                )
            )
            self.interrupter.reset()
            with self.interrupter.catch_sigint():
                self._loop(position)
            self._close_plotter()  # the last plots are drawn before the run's time is taken
            duration = self.elapsed_before + time.perf_counter() - started
            summary = LearnerSummary.from_history(
                self.history,
                self._numeric_names(),
                duration,
                model=type(self.model).__name__,
                stopped=self.stopped,
            )
            if self.artifact_dir is not None and self.main:
                atomic_write_text(self.artifact_dir / "summary.json", json.dumps(summary.to_dict(), indent=2))
            self.renderer.end(summary if self.training._summary else None)
        finally:
            self._close_plotter()
            self.renderer.close()
            if self.logger is not None:
                self.logger.close()
            if self.tensorboard is not None:
                self.tensorboard.close()
            if handler is not None:
                log.removeHandler(handler)
                handler.close()
        self.learner.model = self.model
        epochs = self.history.epochs()
        return TrainingResult(
            self.model,
            summary,
            self.history,
            epochs[-1] if epochs else 0,
            interrupted=self.interrupted,
            stopped_early=bool(self.stopped) and not self.interrupted,
            checkpoint=self.last_checkpoint,
        )

    def _numeric_names(self) -> list[str]:
        names = self.train_group.numeric_names()
        return names + [n for n in self.valid_group.numeric_names() if n not in names]

    @staticmethod
    def _start_epoch(position: CheckpointPosition | None) -> int:
        if position is None:
            return 1
        return position.epoch + 1 if position.phase == "done" else position.epoch

    def _start_logger(self, position: CheckpointPosition | None) -> None:
        if self.artifact_dir is None or not self.main:
            return
        choice = self.training._logger
        self.logger = (
            choice if isinstance(choice, FileMetricLogger) else FileMetricLogger(self.artifact_dir / "logs", choice)
        )
        keep = None
        if position is not None:
            n_train = len(self.train_loader)
            keep = {
                "epoch": position.epoch,
                "train_batches": position.batch if position.phase == "train" else n_train,
                "valid_done": position.phase == "done",
            }
        epochs_columns = self.train_group.names() + [
            n for n in self.valid_group.names() if n not in self.train_group.names()
        ]
        self.logger.start(
            {"train": self.train_group.names(), "valid": self.valid_group.names(), "epochs": epochs_columns}, keep=keep
        )

    def _start_tensorboard(self) -> None:
        board = self.training._tensorboard
        if board is None or not self.main:
            return
        if board.log_dir is None:
            if self.artifact_dir is None:
                raise ConfigError(
                    "ember: logger_tensorboard(): give a log_dir, or an artifact directory to "
                    "SupervisedTraining(artifact_dir) (the files then go to <artifact_dir>/tensorboard)"
                )
            board = copy.copy(board)
            board.log_dir = self.artifact_dir / "tensorboard"
        self.tensorboard = board
        board.start()

    # ------------------------------------------------------------------ loop
    def _loop(self, position: CheckpointPosition | None) -> None:
        phase, batch, metric_state, train_values = "train", 0, None, None
        epoch = self._start_epoch(position)
        if position is not None and position.phase != "done":
            state = self._resume_state
            assert state is not None  # _load_checkpoint keeps the state it resumed
            phase, batch = position.phase, position.batch
            metric_state = state.get("metrics") if self.main else None  # rank 0 holds the merged state
            train_values = state.get("train_values")
        while epoch <= self.num_epochs:
            started = time.perf_counter()
            if phase == "train":
                train_values, done = self._train_epoch(epoch, batch, metric_state)
                if train_values is None:
                    save_checkpoint(
                        self,
                        CheckpointPosition.of(epoch, "train", done),
                        metrics=self.parallel.merged_states(self.train_group),
                    )
                    self.interrupted = True
                    break
            if self._should_stop():
                self._note_interrupt()
                save_checkpoint(self, CheckpointPosition.of(epoch, "valid"), train_values=train_values)
                self.interrupted = True
                break
            valid_values = self._valid_epoch(epoch)
            if valid_values is None:
                save_checkpoint(self, CheckpointPosition.of(epoch, "valid"), train_values=train_values)
                self.interrupted = True
                break
            assert train_values is not None  # from this epoch's training, or restored with a valid-phase checkpoint
            self._end_epoch(epoch, train_values, valid_values, started)
            if self.early_stopping is not None and self.early_stopping.should_stop(epoch, self.history):
                self.stopped = self.early_stopping.reason()
                self.note(f"Stopped after epoch {epoch}: {self.stopped}")
                break
            if self._should_stop():
                self._note_interrupt()
                self.interrupted = True
                break
            phase, batch, metric_state, train_values = "train", 0, None, None
            epoch += 1
        if self.interrupted:
            self.stopped = self.interrupter.reason or "interrupted"

    def _should_stop(self) -> bool:
        """The interrupter's request, agreed by every rank (a stop on one stops all)."""
        stop = self.parallel.agree(self.interrupter.should_stop())
        if stop and not self.interrupter.should_stop():
            self.interrupter.stop("stopped on another rank")
        return stop

    def _note_interrupt(self) -> None:
        if not self._interrupt_noted:
            self._interrupt_noted = True
            self.note(
                f"Training {self.interrupter.reason or 'stopped'}: finishing the current step and saving a "
                "checkpoint (Ctrl-C again aborts at once)"
            )

    def _eta(self, split: Split, epoch: int, iteration: int) -> float | None:
        n_train = len(self.train_loader)
        n_valid = 0 if self.valid_loader is None else len(self.valid_loader)
        train_times, valid_times = self._seconds[Split.TRAIN], self._seconds[Split.VALID]
        if not train_times:
            return None
        per_train = sum(train_times[-50:]) / len(train_times[-50:])
        per_valid = sum(valid_times[-50:]) / len(valid_times[-50:]) if valid_times else per_train / 3
        epochs_after = self.num_epochs - epoch
        if split is Split.TRAIN:
            left_train = n_train - iteration + epochs_after * n_train
            left_valid = (epochs_after + 1) * n_valid
        else:
            left_train = epochs_after * n_train
            left_valid = n_valid - iteration + epochs_after * n_valid
        return left_train * per_train + left_valid * per_valid

    def _train_epoch(self, epoch: int, start: int, metric_state: dict | None) -> tuple[dict | None, int]:
        learner, scheduler = self.learner, self.learner.lr_scheduler
        parallel = self.parallel
        group = self.train_group
        group.start_epoch()
        if metric_state:
            try:
                group.load_state_dict(metric_state)
            except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
                raise RecordError(
                    f"ember: checkpoint {self.last_checkpoint} is corrupt: its field 'metrics' does not hold the "
                    f"states of this run's metrics ({type(error).__name__}: {error}); delete the checkpoint folder to "
                    "resume from an earlier one, or train in a new artifact directory"
                ) from None
        n = len(self.train_loader)
        accumulation = self.training._grads_accumulation
        accumulator = GradientsAccumulator() if accumulation else None
        pending = 0
        model = self.model
        iteration = start
        per_epoch = getattr(learner, "lr_step", "iteration") == "epoch"
        lr = self._epoch_lr(epoch, start) if per_epoch else 0.0
        batches = self.train_loader.iter(epoch - 1, start)
        items_before = batches.progress().items_processed
        try:
            while True:
                tick = time.perf_counter()
                try:
                    batch = next(batches)
                except StopIteration:
                    break
                iteration += 1
                if not per_epoch:
                    lr = scheduler.step()
                if accumulator is not None:
                    out = learner.train_step(model, batch)
                    accumulator.accumulate(model, out.grads)
                    item = out.item
                    pending += 1
                    if pending == accumulation:
                        model = learner.optimizer_step(lr, model, parallel.sync_grads(accumulator.grads(), model))
                        pending = 0
                elif parallel.world_size == 1:
                    model, item = learner.update_step(lr, model, batch)
                else:
                    out = parallel.train_step(learner, model, batch)  # gradients averaged over ranks
                    model = learner.optimizer_step(lr, model, out.grads)
                    item = out.item
                progress = batches.progress()
                metadata = MetricMetadata(
                    Split.TRAIN,
                    epoch,
                    self.num_epochs,
                    iteration,
                    n,
                    progress.items_processed - items_before,
                    progress.items_processed,
                    progress.items_total,
                    lr,
                )
                items_before = progress.items_processed
                entries = group.update(item, metadata)
                self._last_lr = lr
                self._log_iteration("train", metadata, entries, (epoch - 1) * n + iteration, lr)
                self._seconds[Split.TRAIN].append(time.perf_counter() - tick)
                if self._renders_steps:
                    self.renderer.update(
                        TrainingProgress(
                            Split.TRAIN,
                            epoch,
                            self.num_epochs,
                            iteration,
                            n,
                            progress.items_processed,
                            progress.items_total,
                            self._eta(Split.TRAIN, epoch, iteration),
                        ),
                        entries,
                    )
                if self._should_stop():
                    self._note_interrupt()
                    if pending == 0 and iteration < n:
                        self.model = model
                        return None, iteration
            if pending:
                assert accumulator is not None  # pending counts accumulated steps
                model = learner.optimizer_step(lr, model, parallel.sync_grads(accumulator.grads(), model))
        finally:
            batches.close()
        self.model = model
        return parallel.epoch_values(group), iteration

    def _epoch_lr(self, epoch: int, start: int) -> float:
        """The rate of ``epoch`` under ``lr_step="epoch"``: the scheduler steps at the
        epoch's first batch; an epoch resumed mid-way takes the rate its checkpoint kept."""
        if start == 0 or self._resume_state is None or self._resume_state.get("epoch_lr") is None:
            self._lr_of_epoch = float(self.learner.lr_scheduler.step())
        else:
            self._lr_of_epoch = float(self._resume_state["epoch_lr"])
        return self._lr_of_epoch

    def _valid_epoch(self, epoch: int) -> dict[str, float] | None:
        if self.valid_loader is None:
            return {}
        group = self.valid_group
        group.start_epoch()
        model = self.model.valid()
        n = len(self.valid_loader)
        batches = self.valid_loader.iter(epoch - 1)
        items_before = 0
        try:
            for iteration, batch in enumerate(batches, start=1):
                tick = time.perf_counter()
                item = self.learner.valid_step(model, batch)
                progress = batches.progress()
                metadata = MetricMetadata(
                    Split.VALID,
                    epoch,
                    self.num_epochs,
                    iteration,
                    n,
                    progress.items_processed - items_before,
                    progress.items_processed,
                    progress.items_total,
                )
                items_before = progress.items_processed
                entries = group.update(item, metadata)
                self._log_iteration("valid", metadata, entries, (epoch - 1) * n + iteration)
                self._seconds[Split.VALID].append(time.perf_counter() - tick)
                if self._renders_steps:
                    self.renderer.update(
                        TrainingProgress(
                            Split.VALID,
                            epoch,
                            self.num_epochs,
                            iteration,
                            n,
                            progress.items_processed,
                            progress.items_total,
                            self._eta(Split.VALID, epoch, iteration),
                        ),
                        entries,
                    )
                # Ranks may hold different numbers of validation batches: a parallel run
                # finishes validation and agrees on stopping afterwards.
                if self.parallel.world_size == 1 and self.interrupter.should_stop() and iteration < n:
                    self._note_interrupt()
                    return None
        finally:
            batches.close()
        return self.parallel.epoch_values(group)

    def _log_iteration(
        self, stream: str, metadata: MetricMetadata, entries: list, global_step: int, lr: float | None = None
    ) -> None:
        if self.logger is not None:
            row = {"epoch": metadata.epoch, "iteration": metadata.iteration, "items": metadata.batch_size}
            row.update({e.name: e.current for e in entries})
            self.logger.log(stream, row)
        if self.tensorboard is not None:
            self.tensorboard.log_step(stream, global_step, {e.name: e.current for e in entries}, lr)

    def _end_epoch(self, epoch: int, train_values: dict, valid_values: dict, started: float) -> None:
        """Records, logs, plots and checkpoints the epoch, then reports it: the time
        shown runs from the epoch's first batch to the end of all that."""
        self.history.record(Split.TRAIN, epoch, train_values)
        self.history.record(Split.VALID, epoch, valid_values)
        if self.logger is not None:
            self.logger.log("epochs", {"epoch": epoch, "split": "train", **train_values})
            if self.valid_loader is not None:
                self.logger.log("epochs", {"epoch": epoch, "split": "valid", **valid_values})
        if self.tensorboard is not None:
            splits = {"train": train_values, **({"valid": valid_values} if self.valid_loader is not None else {})}
            self.tensorboard.log_epoch(epoch, splits, self._last_lr, self.model)
        self._plot()
        if self.checkpointer is not None:
            save_checkpoint(self, CheckpointPosition.of(epoch, "done"))
            if self.main:
                apply_strategy(self, epoch)
        report = EpochReport(
            epoch,
            self.num_epochs,
            time.perf_counter() - started,
            self.train_group.epoch_entries(train_values),
            self.valid_group.epoch_entries(valid_values),
        )
        log.info(epoch_line(report))
        self.renderer.epoch_end(report)

    def _plot(self) -> None:
        if self.artifact_dir is None or not self.training._plots or not self.main:
            return
        if not matplotlib_available():
            if not self._plot_note:
                self._plot_note = True
                self.note("Plots skipped: matplotlib is not installed (pip install matplotlib, or ember[plot])")
            return
        if self._plotter is None:
            units = {m.name: m.unit for m in self.train_group.metrics + self.valid_group.metrics}
            self._plotter = BackgroundPlotter(self.artifact_dir / "plots", self._numeric_names(), units)
        self._plotter.submit(self.history)  # drawn on the plotter's thread

    def _close_plotter(self) -> None:
        """Draws the last plots and waits for them; a drawing's error becomes a note."""
        plotter, self._plotter = self._plotter, None
        if plotter is None:
            return
        error = plotter.close()
        if error is not None:
            text = f"Plots failed: {type(error).__name__}: {error}"
            log.warning(text)
            self.renderer.message(text)
