"""``TrainingState``: a hand-written training loop's model, optimizer, learning-rate
scheduler, random generator and step, saved and restored in one call.

The Learner checkpoints itself; a loop of one's own (``for step in ...: model =
optim.step(...)``) saves a ``TrainingState``. ``save(path)`` writes a folder,
``model.safetensors`` (``Module.load_file`` reads it), ``optimizer.safetensors``
(``ModuleOptimizer.load_file``), ``state.json`` (the step, the scheduler's position,
the generator's state and the user's ``extra`` values) and ``manifest.json`` with the
SHA-256 of each, built in a hidden folder and renamed into place: a crash mid-save
leaves the previous state whole. ``load`` checks the checksums first and restores
everything, so a resumed run continues bit for bit.

>>> state = TrainingState(model, optim, scheduler, step=step)        # doctest: +SKIP
>>> state.save("runs/lm/state")                                      # doctest: +SKIP
>>> state = TrainingState.load("runs/lm/state", model, optim, scheduler, device=device)  # doctest: +SKIP
>>> model, step = state.model, state.step                            # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ember.device import Device
from ember.errors import ConfigError, RecordError
from ember.module import Module
from ember.optim import ModuleOptimizer
from ember.train.checkpoint import fields as f
from ember.train.checkpoint.manifest import fsync_dir, verify_manifest, write_manifest, write_synced

FORMAT = "ember-training-state"
VERSION = 1
_FILES = ("model.safetensors", "optimizer.safetensors", "state.json")
#: Every field of ``state.json``: ``{name: (check, required)}``.
_STATE_FIELDS: dict[str, tuple[f.Check, bool]] = {
    "format": (f.one_of((FORMAT,)), True),
    "version": (f.one_of((VERSION,)), True),
    "step": (f.integer(0), True),
    "rng": (f.table(f.any_json, what="a generator state (device.rng_state())"), True),
    "scheduler": (
        f.optional(f.record({"type": f.string, "record": f.any_json}, 'an object {"type": str, "record": ...}')),
        False,
    ),
    "extra": (f.optional(f.table(f.any_json, keys=f.string)), False),
}


@dataclass
class TrainingState:
    """What a training loop needs to resume: ``model``, ``optim`` (a
    ``ModuleOptimizer``), ``scheduler`` (an ``LrScheduler`` or ``None``), ``step`` and
    ``extra`` (JSON values of the user's: the epoch, the best loss, ...). The random
    generator's state is read from the device at :meth:`save` and restored by
    :meth:`load`."""

    model: Module
    optim: Any
    scheduler: Any = None
    step: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------ save
    def save(self, path: str | os.PathLike, device: Device | None = None) -> Path:
        """Writes the state to the folder ``path`` atomically (replacing an older state
        there), with ``device``'s generator state (default: ``Device.default()``)."""
        if not isinstance(self.model, Module):
            raise ConfigError(f"ember: TrainingState.save: model must be a Module, got {type(self.model).__name__}")
        if isinstance(self.step, bool) or not isinstance(self.step, int) or self.step < 0:
            raise ConfigError(f"ember: TrainingState.save: step must be an int >= 0, got {self.step!r}")
        device = device or Device.default()
        state = {
            "format": FORMAT,
            "version": VERSION,
            "step": self.step,
            "rng": device.rng_state(),
            "scheduler": None
            if self.scheduler is None
            else {
                "type": type(self.scheduler).__name__,
                "record": self.scheduler.to_record(),
            },
            "extra": self.extra,
        }
        try:
            text = json.dumps(state, allow_nan=True)
        except (TypeError, ValueError) as error:
            raise ConfigError(
                f"ember: TrainingState.save: extra must hold JSON values (numbers, strings, lists, dicts): {error}"
            ) from None
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".tmp-{target.name}-"))
        try:
            self.model.save_file(tmp / "model.safetensors")
            self.optim.save_file(tmp / "optimizer.safetensors")
            write_synced(tmp / "state.json", text)
            write_manifest(tmp, FORMAT, VERSION, _FILES)
            fsync_dir(tmp)
            old = None
            if target.exists():
                if not (target / "manifest.json").is_file():
                    raise RecordError(
                        f"ember: TrainingState.save: {target} exists and is not a training state; "
                        "choose another path (nothing was overwritten)"
                    )
                old = target.parent / f".old-{target.name}-{os.getpid()}"
                os.replace(target, old)
            os.replace(tmp, target)
            fsync_dir(target.parent)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
            return target
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    # ------------------------------------------------------------------ load
    @staticmethod
    def exists(path: str | os.PathLike) -> bool:
        """Whether ``path`` holds a saved training state (to decide between resuming
        and starting fresh)."""
        return (Path(path) / "manifest.json").is_file()

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        model: Module,
        optim: Any,
        scheduler: Any = None,
        device: Device | None = None,
    ) -> TrainingState:
        """The state saved at ``path``: ``model`` (a module of the same structure, e.g.
        freshly built) with the saved values, ``optim`` and ``scheduler`` restored in
        place, ``device``'s generator restored (default: ``Device.default()``)."""
        folder = Path(path)
        device = device or Device.default()
        state = _verified(folder)
        try:
            loaded = model.load_file(folder / "model.safetensors")
        except RecordError as error:
            raise RecordError(f"ember: cannot restore the model from {folder}: {error}") from None
        try:
            if isinstance(optim, ModuleOptimizer):  # checks that the states belong to this model
                optim.load_file(folder / "optimizer.safetensors", device=device.inner(), module=loaded)
            else:
                optim.load_file(folder / "optimizer.safetensors", device=device.inner())
        except (RecordError, ConfigError) as error:
            raise RecordError(
                f"ember: cannot restore the optimizer from {folder} (was it saved with another optimizer?): {error}"
            ) from None
        saved = state.get("scheduler")
        if (saved is None) != (scheduler is None):
            raise RecordError(
                f"ember: {folder} was saved {'without' if saved is None else 'with'} a learning-rate scheduler; "
                f"pass {'scheduler=None' if saved is None else 'the scheduler (a fresh one of type ' + str(saved.get('type')) + ')'}"
            )
        if scheduler is not None:
            assert saved is not None  # checked above: both or neither
            if saved.get("type") != type(scheduler).__name__:
                raise RecordError(
                    f"ember: {folder} holds the position of a {saved.get('type')}, not of a {type(scheduler).__name__}; "
                    "pass the scheduler the run was saved with"
                )
            scheduler.load_record(saved.get("record"))
        try:
            device.set_rng_state(state["rng"])
        except ValueError as error:
            raise RecordError(
                f"ember: training state {folder / 'state.json'} is corrupt: its field 'rng' is not a generator "
                f"state ({error})"
            ) from None
        return cls(loaded, optim, scheduler, int(state["step"]), dict(state.get("extra") or {}))


def _verified(folder: Path) -> dict[str, Any]:
    """``state.json`` of ``folder`` after checking the manifest and the checksums."""
    if not folder.exists():
        raise RecordError(f"ember: no training state at {folder} (TrainingState.exists(path) tells before loading)")
    verify_manifest(
        folder,
        fmt=FORMAT,
        version=VERSION,
        files=_FILES,
        what="training state",
        foreign="a training state saved by TrainingState.save",
    )
    try:
        state = json.loads((folder / "state.json").read_text())
    except (OSError, ValueError) as error:
        raise RecordError(f"ember: training state {folder} is corrupt: state.json is unreadable ({error})") from None
    f.check_fields(state, _STATE_FIELDS, f"training state {folder / 'state.json'}")
    return state
