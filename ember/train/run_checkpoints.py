"""The checkpoint side of a :class:`~ember.train.loop.TrainingRun`: choosing the
checkpoint to resume from (the newest intact one, or the epoch asked for), loading
it (model, optimizer, scheduler, scaler, generator, history), rescaling its position
to this run's world size, saving one and pruning by the checkpointing strategy."""

from __future__ import annotations

import logging
import time
import warnings
from typing import TYPE_CHECKING, Any

from ember.device.generator import is_legacy_state, legacy_seed
from ember.errors import RecordError
from ember.train.checkpoint import CheckpointPosition, FileCheckpointer
from ember.train.history import MetricHistory

if TYPE_CHECKING:
    from ember.train.loop import TrainingRun

log = logging.getLogger("ember.train")


def _restore_rng(run: TrainingRun, state: Any) -> None:
    """The checkpoint's generator state; one from ember's former PCG64 generator
    cannot be restored, so the run goes on from a seed derived from it (the same
    for every resume of that checkpoint), with a warning."""
    if is_legacy_state(state):
        seed = legacy_seed(state)
        run.device.seed(seed)
        message = (
            "The checkpoint's random state comes from the PCG64 generator of an older ember; "
            f"resuming with the device seeded with {seed:#x} (derived from it): random draws "
            "(dropout, Tensor.random) differ from the uninterrupted run"
        )
        log.warning(message)
        run.renderer.message(message)
        return
    run.device.set_rng_state(state)


def resume(run: TrainingRun) -> CheckpointPosition | None:
    """The position the run resumes from (its checkpoint loaded into ``run``), or
    ``None`` to start afresh."""
    ckpt = run.checkpointer
    if ckpt is None:
        return None
    target = _resume_target(run, ckpt) if run.main else None
    # Rank 0 chooses (and prunes); every rank loads the same checkpoint.
    chosen = run.parallel.broadcast(None if target is None else (target.epoch, target.rank, target.batch))
    if chosen is None:
        return None
    return _load_checkpoint(run, ckpt, CheckpointPosition(*chosen))


def _resume_target(run: TrainingRun, ckpt: FileCheckpointer) -> CheckpointPosition | None:
    ckpt.clean_temporary()
    positions = ckpt.list()
    wanted = run.training._checkpoint
    target: CheckpointPosition | None
    if wanted is not None:
        target = CheckpointPosition.of(wanted, "done")
        if target not in positions:
            raise RecordError(
                f"ember: SupervisedTraining.checkpoint({wanted}): {ckpt.directory} has no checkpoint for the end of "
                f"epoch {wanted}; the finished epochs with checkpoints are {ckpt.epochs() or 'none'}"
            )
        for newer in [p for p in positions if p > target]:
            ckpt.delete(newer)
            run.note(f"Removed checkpoint {newer.name}: training restarts from epoch {wanted}")
    else:
        target = _newest_intact(run, ckpt, positions)
    return target


def _newest_intact(
    run: TrainingRun, ckpt: FileCheckpointer, positions: list[CheckpointPosition]
) -> CheckpointPosition | None:
    """The newest checkpoint whose files match their manifest. Damaged newer ones are
    skipped with a warning naming them; if every one is damaged, the newest's error."""
    failures: list[tuple[CheckpointPosition, RecordError]] = []
    for position in reversed(positions):
        try:
            ckpt.verify(position)
        except RecordError as error:
            failures.append((position, error))
            continue
        if failures:
            skipped = ", ".join(p.name for p, _ in failures)
            text = (
                f"Skipped checkpoint {skipped}: it is damaged ({failures[0][1]}). Resuming from the newest "
                f"intact checkpoint, {position.name}"
            )
            warnings.warn(f"ember: {text}", RuntimeWarning, stacklevel=5)
            run.note(text)
        run._verified = position
        return position
    if not failures:
        return None
    newest_failure = failures[0][1]
    if len(failures) > 1:
        raise RecordError(f"{newest_failure} (the {len(failures) - 1} older checkpoints are damaged too)") from None
    raise newest_failure


def _load_checkpoint(run: TrainingRun, ckpt: FileCheckpointer, target: CheckpointPosition) -> CheckpointPosition:
    verified = run._verified == target  # checked just now while choosing it
    model, records, state = ckpt.load(target, run.model, run.learner.optim, run.device.inner(), check=not verified)
    try:
        run.learner.lr_scheduler.load_record(records["scheduler"])
        if run.learner.grad_scaler.is_enabled() and "grad_scaler" in records:
            run.learner.grad_scaler.load_state_dict(records["grad_scaler"])
        _restore_rng(run, records["rng"])
        run.history = MetricHistory.from_dict(state["history"])
        run.elapsed_before = float(state.get("elapsed", 0.0))
        run._resume_state = state
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise RecordError(
            f"ember: checkpoint {ckpt.path(target)} does not fit this training ({type(error).__name__}: {error}); "
            "train in a new artifact directory or delete the checkpoint folder"
        ) from None
    run.model = model
    run.last_checkpoint = ckpt.path(target)
    run.note(f"Resumed from checkpoint {target.name} ({target.describe()})")
    target = _rescale_position(run, target, state)
    if target.phase == "done" and target.epoch >= run.num_epochs:
        run.note(f"The checkpoint already completes {target.epoch} epochs; raise num_epochs to train further")
    return target


def _rescale_position(run: TrainingRun, target: CheckpointPosition, state: dict) -> CheckpointPosition:
    """A checkpoint taken inside a training epoch under another world size: the
    same number of items read, in batches of this run (exact when it divides)."""
    saved = int(state.get("world_size", 1))
    now = run.parallel.world_size
    if target.phase != "train" or saved == now:
        return target
    items = target.batch * saved
    if items % now:
        raise RecordError(
            f"ember: checkpoint {run.last_checkpoint} was taken after {target.batch} batches per rank on {saved} "
            f"ranks, which is not a whole number of steps on {now} ranks; resume it on {saved} ranks (or a "
            f"world size dividing {items}), or from the end of an epoch with SupervisedTraining.checkpoint(epoch)"
        )
    return CheckpointPosition.of(target.epoch, "train", items // now)


def save_checkpoint(
    run: TrainingRun, position: CheckpointPosition, metrics: dict | None = None, train_values: dict | None = None
) -> None:
    """Saves the run at ``position`` (rank 0 only; without a checkpointer, notes that
    nothing was saved when the run stops mid-epoch)."""
    if run.checkpointer is None:
        if position.phase != "done":
            reason = "no artifact directory" if run.artifact_dir is None else "checkpointing is off"
            run.note(f"Stopped at {position.describe()}; no checkpoint saved ({reason})")
        return
    if not run.main:  # rank 0 alone writes checkpoints
        return
    state = {
        "position": {"epoch": position.epoch, "phase": position.phase, "batch": position.batch},
        "history": run.history.to_dict(),
        "metrics": metrics,
        "train_values": train_values,
        "num_epochs": run.num_epochs,
        "model": type(run.model).__name__,
        "elapsed": run.elapsed_before + time.perf_counter() - run._run_started,
        "world_size": run.parallel.world_size,
        "epoch_lr": run._lr_of_epoch if getattr(run.learner, "lr_step", "iteration") == "epoch" else None,
    }
    records = {"scheduler": run.learner.lr_scheduler.to_record(), "rng": run.device.rng_state()}
    if run.learner.grad_scaler.is_enabled():
        records["grad_scaler"] = run.learner.grad_scaler.state_dict()
    run.last_checkpoint = run.checkpointer.save(position, run.model, run.learner.optim, records, state)
    if position.phase != "done":
        run.note(f"Saved checkpoint {position.name} ({position.describe()}); run fit again to resume")


def apply_strategy(run: TrainingRun, epoch: int) -> None:
    """Deletes the mid-epoch checkpoints up to ``epoch`` and the finished epochs the
    checkpointing strategy does not keep (the newest always stays)."""
    ckpt = run.checkpointer
    assert ckpt is not None  # called only when checkpointing
    for position in ckpt.list():
        if position.phase != "done" and position.epoch <= epoch:
            ckpt.delete(position)
    epochs = ckpt.epochs()
    keep = run.strategy.keep(epochs, run.history) | {max(epochs)}
    for e in epochs:
        if e not in keep:
            ckpt.delete(CheckpointPosition.of(e, "done"))
