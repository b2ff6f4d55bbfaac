"""A checkpoint's ``state.json`` with a valid checksum but a field of the wrong type
(issue 31 item 12) is refused on resume with a RecordError naming the field, before
anything is restored: a Learner checkpoint and a ``TrainingState``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ember import Device
from ember.errors import RecordError
from ember.train import TrainingState
from ember.train.checkpoint.checkpointer import _FILES, FORMAT, VERSION
from ember.train.checkpoint.manifest import write_manifest
from tests.train.test_checkpoint import fit
from tests.train.test_training_state import fresh


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A run of one finished epoch, and one stopped inside its first epoch (metric states saved)."""
    done, inside = tmp_path_factory.mktemp("done"), tmp_path_factory.mktemp("inside")
    fit(done, epochs=1)
    fit(inside, epochs=1, stop_after=4)
    return done, inside


def tampered(source: Path, target: Path, folder_name: str, edit) -> Path:
    """A copy of the run at ``source`` whose checkpoint ``folder_name`` has ``edit``
    applied to its state.json, with the manifest's checksums rewritten to match."""
    shutil.copytree(source, target)
    folder = target / "checkpoint" / folder_name
    state = json.loads((folder / "state.json").read_text())
    edit(state)
    (folder / "state.json").write_text(json.dumps(state))
    manifest = json.loads((folder / "manifest.json").read_text())
    write_manifest(folder, FORMAT, VERSION, _FILES, position=manifest["position"])
    return target


def setter(name, value):
    def edit(state):
        state[name] = value

    return edit


def deleter(name):
    def edit(state):
        del state[name]

    return edit


LEARNER_CASES = {
    # the case: a raw AttributeError ('str' object has no attribute 'items') before
    "history is a string": (setter("history", "garbage"), r"field 'history' is a str \('garbage'\), expected \{split"),
    "history split": (setter("history", {"test": {}}), r"field 'history' has the key 'test', expected keys that are"),
    "history metric": (setter("history", {"train": {"Loss": [1.0]}}), r"field 'history.train.Loss' is a list"),
    "history epoch": (
        setter("history", {"train": {"Loss": {"one": 1.0}}}),
        r"field 'history.train.Loss' has the key 'one', expected keys that are an epoch number",
    ),
    "history value": (
        setter("history", {"train": {"Loss": {"1": "low"}}}),
        r"field 'history.train.Loss.1' is a str \('low'\), expected a number",
    ),
    "history missing": (deleter("history"), r"field 'history' is missing"),
    "position": (setter("position", [1, "done", 0]), r"field 'position' is a list"),
    "position phase": (
        setter("position", {"epoch": 1, "phase": "finished", "batch": 0}),
        r"field 'position.phase' is a str \('finished'\), expected one of 'train', 'valid', 'done'",
    ),
    "position elsewhere": (
        setter("position", {"epoch": 2, "phase": "done", "batch": 0}),
        r"field 'position' .* is not the position of its folder \(end of epoch 1\)",
    ),
    "format": (setter("format", "other"), r"field 'format' is a str \('other'\), expected one of"),
    "version": (setter("version", "1"), r"field 'version' is a str \('1'\)"),
    "metrics": (setter("metrics", ["loss"]), r"field 'metrics' is a list"),
    "metric state": (setter("metrics", {"Loss": {"total": "x"}}), r"field 'metrics.Loss.total' is a str"),
    "train values": (setter("train_values", {"Loss": None}), r"field 'train_values.Loss' is a NoneType"),
    "num_epochs": (setter("num_epochs", 2.5), r"field 'num_epochs' is a float \(2.5\), expected an int >= 0"),
    "model": (setter("model", 3), r"field 'model' is a int \(3\), expected a string"),
    "elapsed": (setter("elapsed", "1s"), r"field 'elapsed' is a str"),
    "world_size": (setter("world_size", 0), r"field 'world_size' is a int \(0\), expected an int >= 1"),
    "epoch_lr": (setter("epoch_lr", True), r"field 'epoch_lr' is a bool"),
    "not an object": (lambda state: state.clear(), r"field 'format' is missing"),
}


@pytest.mark.parametrize("case", sorted(LEARNER_CASES))
def test_a_learner_checkpoint_with_a_field_of_the_wrong_type_names_it(case, runs, tmp_path):
    edit, fault = LEARNER_CASES[case]
    path = tampered(runs[0], tmp_path / "run", "epoch-0001", edit)
    folder = path / "checkpoint" / "epoch-0001"
    with pytest.raises(RecordError, match=rf"checkpoint {folder / 'state.json'} is corrupt: its {fault}.*delete"):
        fit(path, epochs=2)


def test_the_metric_states_of_another_run_are_named(runs, tmp_path):
    """Well-formed JSON that does not fit the run's metrics (a state without its fields)."""
    source = runs[1]
    name = next(p.name for p in (source / "checkpoint").iterdir() if "step" in p.name)
    path = tampered(source, tmp_path / "run", name, setter("metrics", {"Loss": {"sum": 1.0}}))
    with pytest.raises(RecordError, match=r"is corrupt: its field 'metrics' does not hold the states of this run's"):
        fit(path, epochs=1)


def test_an_intact_checkpoint_still_resumes(runs, tmp_path):
    path = tampered(runs[1], tmp_path / "run", next(p.name for p in (runs[1] / "checkpoint").iterdir()), lambda s: s)
    result = fit(path, epochs=1)
    assert result is not None


STATE_CASES = {
    "step": (setter("step", "3"), r"field 'step' is a str \('3'\), expected an int >= 0"),
    "negative step": (setter("step", -1), r"field 'step' is a int \(-1\), expected an int >= 0"),
    "step missing": (deleter("step"), r"field 'step' is missing"),
    "rng": (setter("rng", "philox"), r"field 'rng' is a str \('philox'\), expected a generator state"),
    "rng content": (setter("rng", {"algorithm": "pcg"}), r"field 'rng' is not a generator state"),
    "scheduler": (setter("scheduler", {"type": 3, "record": {}}), r"field 'scheduler.type' is a int"),
    "scheduler shape": (setter("scheduler", "Cosine"), r"field 'scheduler' is a str"),
    "extra": (setter("extra", [1, 2]), r"field 'extra' is a list \(\[1, 2\]\), expected an object"),
    "format": (setter("format", None), r"field 'format' is a NoneType"),
}


@pytest.mark.parametrize("case", sorted(STATE_CASES))
def test_a_training_state_with_a_field_of_the_wrong_type_names_it(case, tmp_path):
    from ember.train.state import _FILES as STATE_FILES
    from ember.train.state import FORMAT as STATE_FORMAT
    from ember.train.state import VERSION as STATE_VERSION

    edit, fault = STATE_CASES[case]
    device = Device.flex().autodiff()
    model, optim, scheduler = fresh(device)
    path = tmp_path / "state"
    TrainingState(model, optim, scheduler, step=3, extra={"epoch": 1}).save(path, device)
    state = json.loads((path / "state.json").read_text())
    edit(state)
    (path / "state.json").write_text(json.dumps(state))
    write_manifest(path, STATE_FORMAT, STATE_VERSION, STATE_FILES)
    model, optim, scheduler = fresh(device)
    with pytest.raises(RecordError, match=rf"training state {path / 'state.json'} is corrupt: its {fault}"):
        TrainingState.load(path, model, optim, scheduler, device=device)
