"""``FileCheckpointer``: training checkpoints as folders, written atomically and
checked on load.

A checkpoint ``<directory>/epoch-0003`` (a finished epoch), ``epoch-0003-step-000120``
(training interrupted after 120 batches of epoch 3) or ``epoch-0003-valid`` (epoch 3
trained, its validation interrupted) holds ``model.safetensors`` (the module
record, ``Module.load_file`` reads it), ``optimizer.safetensors`` (the optimizer's
states, ``ModuleOptimizer.load_file`` reads it), ``records.safetensors`` (the
learning-rate scheduler's position and the device generator's state),
``state.json`` (the learner's position, metric history and metric states) and
``manifest.json`` with the SHA-256 of each file. It is written in a hidden folder
and renamed into place, so a crash never leaves a half-written checkpoint.
"""

from __future__ import annotations

import builtins
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ember.device import Device
from ember.errors import ConfigError, RecordError
from ember.module import Module
from ember.module.record import load_record, save_record
from ember.optim import ModuleOptimizer
from ember.train.checkpoint import fields as f
from ember.train.checkpoint.manifest import fsync_dir, verify_manifest, write_manifest, write_synced

FORMAT = "ember-learner-checkpoint"
VERSION = 1
_FILES = ("model.safetensors", "optimizer.safetensors", "records.safetensors", "state.json")
_PHASES = {"train": 0, "valid": 1, "done": 2}
_NAME = re.compile(r"^epoch-(\d+)(?:-step-(\d+)|-(valid))?$")
#: Every field of ``state.json`` the learner reads: ``{name: (check, required)}``
#: (fields that older checkpoints of this version lack are optional).
STATE_FIELDS: dict[str, tuple[f.Check, bool]] = {
    "format": (f.one_of((FORMAT,)), True),
    "version": (f.one_of((VERSION,)), True),
    "position": (
        f.record(
            {"epoch": f.integer(0), "phase": f.one_of(_PHASES), "batch": f.integer(0)},
            'an object {"epoch": int, "phase": "train"|"valid"|"done", "batch": int}',
        ),
        True,
    ),
    "history": (f.HISTORY, True),
    "metrics": (f.optional(f.table(f.table(f.numbers), keys=f.string, what="{metric name: its state}")), False),
    "train_values": (f.optional(f.table(f.number, keys=f.string, what="{metric name: value}")), False),
    "num_epochs": (f.integer(0), False),
    "model": (f.string, False),
    "elapsed": (f.number, False),
    "world_size": (f.integer(1), False),
    "epoch_lr": (f.optional(f.number), False),
}


@dataclass(frozen=True, order=True)
class CheckpointPosition:
    """Where a checkpoint was taken: ``phase`` is ``"done"`` (the epoch finished),
    ``"train"`` (``batch`` training batches of the epoch done) or ``"valid"`` (the
    epoch's training done, its validation not)."""

    epoch: int
    rank: int
    batch: int = 0

    @staticmethod
    def of(epoch: int, phase: str, batch: int = 0) -> CheckpointPosition:
        return CheckpointPosition(int(epoch), _PHASES[phase], int(batch) if phase == "train" else 0)

    @property
    def phase(self) -> str:
        return {v: k for k, v in _PHASES.items()}[self.rank]

    @property
    def name(self) -> str:
        if self.phase == "done":
            return f"epoch-{self.epoch:04d}"
        if self.phase == "valid":
            return f"epoch-{self.epoch:04d}-valid"
        return f"epoch-{self.epoch:04d}-step-{self.batch:06d}"

    @staticmethod
    def parse(name: str) -> CheckpointPosition | None:
        match = _NAME.match(name)
        if match is None:
            return None
        epoch, step, valid = match.groups()
        if step is not None:
            return CheckpointPosition.of(int(epoch), "train", int(step))
        return CheckpointPosition.of(int(epoch), "valid" if valid else "done")

    def describe(self) -> str:
        if self.phase == "done":
            return f"end of epoch {self.epoch}"
        if self.phase == "valid":
            return f"epoch {self.epoch} trained, before validation"
        return f"epoch {self.epoch}, after {self.batch} batches"


class FileCheckpointer:
    """Saves, lists, loads and deletes checkpoints in ``directory``.

    >>> ckpt = FileCheckpointer("artifacts/checkpoint")  # doctest: +SKIP
    >>> best = ckpt.restore_model(model, epoch=7)  # doctest: +SKIP
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)

    def list(self) -> list[CheckpointPosition]:
        """Every checkpoint, oldest first."""
        if not self.directory.is_dir():
            return []
        found = [CheckpointPosition.parse(p.name) for p in self.directory.iterdir() if p.is_dir()]
        return sorted(p for p in found if p is not None)

    def latest(self) -> CheckpointPosition | None:
        positions = self.list()
        return positions[-1] if positions else None

    def epochs(self) -> builtins.list[int]:  # `list` is the method above in this class
        """The finished epochs that have a checkpoint."""
        return [p.epoch for p in self.list() if p.phase == "done"]

    def path(self, position: CheckpointPosition) -> Path:
        return self.directory / position.name

    def clean_temporary(self) -> None:
        """Removes folders left by saves that a crash interrupted."""
        if self.directory.is_dir():
            for p in self.directory.iterdir():
                if p.name.startswith((".tmp-", ".old-")) and p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)

    # ------------------------------------------------------------------ save
    def save(
        self, position: CheckpointPosition, model: Module, optim: Any, records: dict[str, Any], state: dict[str, Any]
    ) -> Path:
        """Writes a checkpoint atomically; replaces one at the same position."""
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=self.directory, prefix=f".tmp-{position.name}-"))
        try:
            model.save_file(tmp / "model.safetensors")
            optim.save_file(tmp / "optimizer.safetensors")
            save_record(tmp / "records.safetensors", records)
            write_synced(
                tmp / "state.json", json.dumps({"format": FORMAT, "version": VERSION, **state}, allow_nan=True)
            )
            write_manifest(tmp, FORMAT, VERSION, _FILES, position=position.name)
            fsync_dir(tmp)
            target = self.path(position)
            old = None
            if target.exists():
                old = self.directory / f".old-{position.name}-{os.getpid()}"
                os.replace(target, old)
            os.replace(tmp, target)
            fsync_dir(self.directory)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
            return target
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def delete(self, position: CheckpointPosition) -> None:
        target = self.path(position)
        if target.exists():
            trash = self.directory / f".old-{position.name}-{os.getpid()}"
            os.replace(target, trash)
            shutil.rmtree(trash, ignore_errors=True)

    # ------------------------------------------------------------------ load
    def verify(self, position: CheckpointPosition) -> Path:
        """Checks the manifest and the checksums; raises a RecordError that says what
        is wrong and what to do."""
        folder = self.path(position)
        advice = f"delete {folder} to resume from an earlier checkpoint, or train in a new artifact directory"
        verify_manifest(
            folder,
            fmt=FORMAT,
            version=VERSION,
            files=_FILES,
            what="checkpoint",
            foreign="an ember learner checkpoint",
            advice=advice,
        )
        return folder

    def load(
        self, position: CheckpointPosition, model: Module, optim: Any, device: Device, *, check: bool = True
    ) -> tuple[Module, dict[str, Any], dict[str, Any]]:
        """``(model with the saved values, records, state)``; ``optim`` is restored in
        place, its states on ``device`` (the inner device: where optimizer states live).
        ``check=False`` skips :meth:`verify` (for a checkpoint verified just before)."""
        folder = self.verify(position) if check else self.path(position)
        state = self._state(folder, position)  # before anything is restored: never half-loaded
        try:
            loaded = model.load_file(folder / "model.safetensors")
        except RecordError as error:
            raise RecordError(f"ember: cannot restore the model from checkpoint {folder}: {error}") from None
        try:
            if isinstance(optim, ModuleOptimizer):  # checks that the states belong to this model
                optim.load_file(folder / "optimizer.safetensors", device=device, module=loaded)
            else:
                optim.load_file(folder / "optimizer.safetensors", device=device)
        except RecordError as error:
            raise RecordError(f"ember: cannot restore the optimizer from checkpoint {folder}: {error}") from None
        except ConfigError as error:
            raise RecordError(
                f"ember: cannot restore the optimizer from checkpoint {folder} (was it saved with another "
                f"optimizer?): {error}"
            ) from None
        records = load_record(folder / "records.safetensors", device=device)
        return loaded, records, state

    @staticmethod
    def _state(folder: Path, position: CheckpointPosition) -> dict[str, Any]:
        """``state.json`` of the checkpoint at ``folder``, every field checked (:data:`STATE_FIELDS`)."""
        try:
            state = json.loads((folder / "state.json").read_text())
        except (OSError, ValueError) as error:
            raise RecordError(f"ember: checkpoint {folder} is corrupt: state.json is unreadable ({error})") from None
        advice = f"; delete {folder} to resume from an earlier checkpoint, or train in a new artifact directory"
        f.check_fields(state, STATE_FIELDS, f"checkpoint {folder / 'state.json'}", advice)
        saved = state["position"]
        if CheckpointPosition.of(saved["epoch"], saved["phase"], saved["batch"]) != position:
            raise RecordError(
                f"ember: checkpoint {folder / 'state.json'} is corrupt: its field 'position' ({saved}) is not the "
                f"position of its folder ({position.describe()}){advice}"
            )
        return state

    def restore_model(self, model: Module, epoch: int | None = None) -> Module:
        """``model`` with the values saved at the end of ``epoch`` (the latest
        checkpoint if ``None``), e.g. to pick the best epoch after training."""
        if epoch is None:
            position = self.latest()
            if position is None:
                raise RecordError(f"ember: no checkpoint in {self.directory}")
        else:
            position = CheckpointPosition.of(epoch, "done")
            if position not in self.list():
                raise RecordError(
                    f"ember: no checkpoint for epoch {epoch} in {self.directory}; the finished epochs "
                    f"with checkpoints are {self.epochs() or 'none'}"
                )
        self.verify(position)
        return model.load_file(self.path(position) / "model.safetensors")
