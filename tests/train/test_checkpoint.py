"""Checkpoints: resuming gives the bit-identical model of an uninterrupted run (inside
an epoch, before validation, at an epoch boundary, with gradient accumulation, after
Ctrl-C in a subprocess); strategies; corrupt checkpoints give clear errors."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ember import Device, Distribution, Tensor
from ember.errors import RecordError
from ember.optim import AdamConfig
from ember.optim.lr_scheduler import LinearLrSchedulerConfig
from ember.train import (
    AccuracyMetric,
    ComposedCheckpointingStrategy,
    FileCheckpointer,
    KeepLastNCheckpoints,
    Learner,
    LossMetric,
    MetricCheckpointingStrategy,
    MetricHistory,
    SupervisedTraining,
)
from tests.train.models import Classifier, loaders, params

ROOT = Path(__file__).resolve().parents[2]


def noisy_step(model, batch):
    """A training step that draws from the device's generator (as dropout does)."""
    x, y = batch
    noise = Tensor.random(x.dims(), Distribution.normal(0.0, 0.1), device=x.device)
    return model.forward_classification((x.add(noise), y))


def valid_step(model, batch):
    return model.forward_classification(batch)


class Stopper:
    """Wraps a step: asks the training to stop after ``after`` steps in total."""

    def __init__(self, step, training, after):
        self.step, self.training, self.after, self.count = step, training, after, 0

    def __call__(self, model, batch):
        self.count += 1
        if self.count == self.after:
            self.training.interrupter().stop("stopped by the test")
        return self.step(model, batch)


def setup(artifact_dir, epochs=3, seed=0, accumulation=None):
    device = Device.flex().autodiff()
    device.seed(seed)
    training = (
        SupervisedTraining(artifact_dir)
        .renderer("none")
        .plots(False)
        .metric_train_numeric(LossMetric())
        .metric_valid_numeric(LossMetric())
        .metric_valid_numeric(AccuracyMetric())
        .num_epochs(epochs)
    )
    if accumulation:
        training.grads_accumulation(accumulation)
    model = Classifier.new(device)
    scheduler = LinearLrSchedulerConfig(2e-2, 1e-3, 20).init()
    return training, model, scheduler


def fit(artifact_dir, epochs=3, seed=0, stop_after=None, stop_in_valid_at=None, accumulation=None, workers=0):
    training, model, scheduler = setup(artifact_dir, epochs, seed, accumulation)
    step, vstep = noisy_step, valid_step
    if stop_after is not None:
        step = Stopper(noisy_step, training, stop_after)
    if stop_in_valid_at is not None:
        vstep = Stopper(valid_step, training, stop_in_valid_at)
    # Eager: the Stopper is a Python side effect (compile="auto" would run these steps
    # eagerly after its first, compiled one; the reference run is all compiled).
    learner = Learner(model, AdamConfig().init(), scheduler, train_step=step, valid_step=vstep, compile=False)
    train, valid = loaders(batch_size=8, workers=workers)  # 72 train items: 9 batches
    return training.launch(learner, train, valid)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    path = tmp_path_factory.mktemp("reference")
    result = fit(path)
    return path, result


def assert_same_run(path, result, ref_path, ref_result):
    assert result.epochs == ref_result.epochs == 3 and not result.interrupted
    got, want = params(result.model), params(ref_result.model)
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)  # bit-identical
    assert result.history.to_dict() == ref_result.history.to_dict()
    for name in ("train.csv", "valid.csv", "epochs.csv"):
        assert (path / "logs" / name).read_text() == (ref_path / "logs" / name).read_text(), name


def test_resume_inside_an_epoch(tmp_path, reference):
    first = fit(tmp_path, stop_after=13)  # epoch 2, after 4 of its 9 batches
    assert first.interrupted and first.checkpoint.name == "epoch-0002-step-000004"
    assert FileCheckpointer(tmp_path / "checkpoint").latest().name == "epoch-0002-step-000004"
    resumed = fit(tmp_path, seed=99)  # another seed: the checkpoint's generator state must win
    assert_same_run(tmp_path, resumed, *reference)
    names = sorted(p.name for p in (tmp_path / "checkpoint").iterdir())
    assert names == ["epoch-0002", "epoch-0003"]  # the partial checkpoint was replaced


def test_resume_before_validation(tmp_path, reference):
    first = fit(tmp_path, stop_in_valid_at=4)  # epoch 2's validation (3 batches per epoch)
    assert first.interrupted and first.checkpoint.name == "epoch-0002-valid"
    assert_same_run(tmp_path, fit(tmp_path, seed=3), *reference)


def test_resume_at_an_epoch_boundary_with_more_epochs(tmp_path, reference):
    first = fit(tmp_path, epochs=2)
    assert first.epochs == 2 and not first.interrupted
    assert_same_run(tmp_path, fit(tmp_path, epochs=3, seed=8), *reference)


def test_resume_with_workers_and_accumulation(tmp_path):
    ref_path = tmp_path / "ref"
    ref = fit(ref_path, accumulation=2, workers=2)
    run = tmp_path / "run"
    first = fit(run, accumulation=2, workers=2, stop_after=12)  # mid accumulation: one more step first
    assert first.checkpoint.name == "epoch-0002-step-000004"
    assert_same_run(run, fit(run, accumulation=2, workers=2, seed=4), ref_path, ref)


def test_a_finished_run_is_not_trained_again(tmp_path, reference):
    path, result = reference
    again = fit(path, seed=42)
    assert again.epochs == 3
    for key, value in params(result.model).items():
        np.testing.assert_array_equal(params(again.model)[key], value)


def test_resume_from_a_chosen_epoch(tmp_path):
    fit(tmp_path, epochs=3)
    training, model, scheduler = setup(tmp_path, epochs=3)
    training.checkpoint(2)
    learner = Learner(model, AdamConfig().init(), scheduler, train_step=noisy_step, valid_step=valid_step)
    train, valid = loaders(batch_size=8)
    result = training.launch(learner, train, valid)
    assert result.epochs == 3 and len(result.history.series("Loss", "train")) == 3
    with pytest.raises(RecordError, match="has no checkpoint for the end of epoch 7"):
        setup(tmp_path)[0].checkpoint(7).launch(learner, train, valid)


@pytest.mark.slow
def test_sigint_finishes_the_step_saves_and_exits_cleanly(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    script = str(ROOT / "tests" / "train" / "run_fit.py")
    child = subprocess.Popen(
        [sys.executable, script, str(tmp_path / "run"), "0.05"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert child.stdout.readline().startswith("Training Classifier")
    for line in child.stdout:
        if line.startswith("READY"):
            break
    child.send_signal(signal.SIGINT)
    out, _ = child.communicate(timeout=120)
    assert child.returncode == 0, out
    assert "interrupted (Ctrl-C): finishing the current step" in out and "Traceback" not in out
    assert "RESULT interrupted=True" in out
    saved = FileCheckpointer(tmp_path / "run" / "checkpoint").latest()
    assert saved is not None and saved.phase == "train"

    resumed = subprocess.run(
        [sys.executable, script, str(tmp_path / "run")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    whole = subprocess.run(
        [sys.executable, script, str(tmp_path / "whole")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resumed.returncode == 0 and whole.returncode == 0, resumed.stdout + resumed.stderr + whole.stderr
    assert f"Resumed from checkpoint {saved.name}" in resumed.stdout
    digest = next(line for line in whole.stdout.splitlines() if line.startswith("RESULT"))
    assert digest.startswith("RESULT interrupted=False epochs=3")
    assert digest in resumed.stdout


# ---------------------------------------------------------------------- strategies
def history_of(losses):
    history = MetricHistory()
    for epoch, value in enumerate(losses, start=1):
        history.record("valid", epoch, {"Loss": value})
    return history


def test_strategies_choose_what_to_keep():
    history = history_of([0.5, 0.3, 0.4, 0.6, 0.35])
    epochs = [1, 2, 3, 4, 5]
    assert KeepLastNCheckpoints(2).keep(epochs, history) == {4, 5}
    assert MetricCheckpointingStrategy(LossMetric()).keep(epochs, history) == {2}
    assert MetricCheckpointingStrategy(AccuracyMetric(), direction="lowest").keep(epochs, history) == set()
    both = ComposedCheckpointingStrategy(KeepLastNCheckpoints(1), MetricCheckpointingStrategy(LossMetric()))
    assert both.keep(epochs, history) == {2, 5}


def test_checkpoints_kept_after_training(tmp_path):
    losses = iter([0.5, 0.5, 0.3, 0.3, 0.4, 0.4, 0.6, 0.6])  # two valid batches per epoch

    def scripted_valid(model, batch):
        item = model.forward_classification(batch)
        item.loss = Tensor.from_floats([next(losses)])
        return item

    device = Device.flex().autodiff()
    training = (
        SupervisedTraining(tmp_path)
        .renderer("none")
        .metric_valid_numeric(LossMetric())
        .num_epochs(4)
        .with_checkpointing_strategy(
            ComposedCheckpointingStrategy(KeepLastNCheckpoints(1), MetricCheckpointingStrategy(LossMetric()))
        )
    )
    train, valid = loaders(batch_size=16)
    valid = valid.slice(0, 24).to_device(Device.flex())
    learner = Learner(Classifier.new(device), AdamConfig().init(), 1e-2, valid_step=scripted_valid)
    result = training.launch(learner, train, valid)
    assert sorted(p.name for p in (tmp_path / "checkpoint").iterdir()) == ["epoch-0002", "epoch-0004"]
    best = FileCheckpointer(tmp_path / "checkpoint").restore_model(Classifier.new(device), epoch=2)
    assert best.num_params() == result.model.num_params()
    with pytest.raises(RecordError, match=r"no checkpoint for epoch 3 .* \[2, 4\]"):
        FileCheckpointer(tmp_path / "checkpoint").restore_model(Classifier.new(device), epoch=3)


# ---------------------------------------------------------------------- corruption
@pytest.fixture
def saved(tmp_path):
    fit(tmp_path, epochs=1)
    return tmp_path, tmp_path / "checkpoint" / "epoch-0001"


def test_corrupt_model_file(saved):
    path, folder = saved
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[-3] ^= 0xFF
    (folder / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(
        RecordError, match=r"epoch-0001 is corrupt: model.safetensors does not match its checksum.*delete"
    ):
        fit(path, epochs=2)


def test_truncated_state(saved):
    path, folder = saved
    (folder / "state.json").write_text((folder / "state.json").read_text()[:20])
    with pytest.raises(RecordError, match="state.json does not match its checksum"):
        fit(path, epochs=2)


def test_missing_manifest_or_file(saved):
    path, folder = saved
    (folder / "records.safetensors").unlink()
    with pytest.raises(RecordError, match="records.safetensors is missing"):
        fit(path, epochs=2)
    (folder / "manifest.json").unlink()
    with pytest.raises(RecordError, match="incomplete: it has no manifest.json"):
        fit(path, epochs=2)


def test_checkpoint_of_another_model(saved):
    path, folder = saved

    class Wider(Classifier):
        pass

    device = Device.flex().autodiff()
    with pytest.raises(RecordError, match="cannot restore the model from checkpoint"):
        training = SupervisedTraining(path).renderer("none").num_epochs(2)
        train, valid = loaders(batch_size=8)
        training.launch(Learner(Wider.new(device, hidden=8), AdamConfig().init(), 1e-2), train, valid)


def test_interrupted_writes_leave_no_checkpoint(tmp_path, monkeypatch):
    """A save that fails midway leaves neither a checkpoint nor a temporary folder."""
    import ember.train.checkpoint.checkpointer as module

    def broken(path, tree, metadata=None):
        raise OSError("disk full")

    monkeypatch.setattr(module, "save_record", broken)
    with pytest.raises(OSError, match="disk full"):
        fit(tmp_path, epochs=1)
    assert list((tmp_path / "checkpoint").iterdir()) == []


def test_log_rows_after_a_crash_are_dropped(tmp_path, reference):
    """Rows logged after the last checkpoint (a crash, not Ctrl-C) are rewritten on resume."""
    fit(tmp_path, epochs=2)
    with (tmp_path / "logs" / "train.csv").open("a") as handle:
        handle.write("3,1,8,9.99\n")  # epoch 3 started, then the process died
    assert_same_run(tmp_path, fit(tmp_path, epochs=3), *reference)
    rows = list(csv.DictReader((tmp_path / "logs" / "train.csv").open()))
    assert all(r["Loss"] != "9.99" for r in rows)
    assert json.loads((tmp_path / "summary.json").read_text())["epochs"] == 3


def test_checkpoint_files_are_ordinary_records(saved):
    """The model and optimizer files of a checkpoint load with the usual APIs."""
    path, folder = saved
    device = Device.flex().autodiff()
    model = Classifier.new(device).load_file(folder / "model.safetensors")
    optim = AdamConfig().init().load_file(folder / "optimizer.safetensors", device=device)
    assert model.num_params() == 131 and len(optim.states) == 4


def test_checkpoint_of_another_optimizer(saved):
    from ember.optim import SgdConfig

    path, folder = saved
    training, model, scheduler = setup(path, epochs=2)
    train, valid = loaders(batch_size=8)
    learner = Learner(model, SgdConfig(momentum=0.9).init(), scheduler, train_step=noisy_step, valid_step=valid_step)
    with pytest.raises(RecordError, match="cannot restore the optimizer from checkpoint .*another optimizer"):
        training.launch(learner, train, valid)


def test_a_damaged_newest_checkpoint_falls_back_to_the_newest_intact_one(tmp_path, reference):
    """The newest checkpoint's model file is damaged: resume from the one before, with a
    warning naming the skipped one, and end with the uninterrupted run's model."""
    fit(tmp_path, epochs=3, stop_after=14)  # epoch 1 done (9 batches), stopped inside epoch 2
    names = sorted(p.name for p in (tmp_path / "checkpoint").iterdir())
    assert names == ["epoch-0001", "epoch-0002-step-000005"]
    damaged = tmp_path / "checkpoint" / "epoch-0002-step-000005" / "model.safetensors"
    data = bytearray(damaged.read_bytes())
    data[-5] ^= 0x01
    damaged.write_bytes(bytes(data))
    with pytest.warns(
        RuntimeWarning,
        match=r"Skipped checkpoint epoch-0002-step-000005: .*does not match its checksum"
        r".* Resuming from the newest intact checkpoint, epoch-0001",
    ):
        result = fit(tmp_path, epochs=3)
    assert_same_run(tmp_path, result, *reference)
    assert "Skipped checkpoint epoch-0002-step-000005" in (tmp_path / "experiment.log").read_text()


def test_an_explicitly_chosen_damaged_checkpoint_does_not_fall_back(tmp_path):
    fit(tmp_path, epochs=2)
    (tmp_path / "checkpoint" / "epoch-0002" / "state.json").write_text("{}")
    training, model, scheduler = setup(tmp_path, epochs=3)
    train, valid = loaders(batch_size=8)
    learner = Learner(model, AdamConfig().init(), scheduler, train_step=noisy_step, valid_step=valid_step)
    with pytest.raises(RecordError, match="epoch-0002 is corrupt: state.json does not match its checksum"):
        training.checkpoint(2).launch(learner, train, valid)
