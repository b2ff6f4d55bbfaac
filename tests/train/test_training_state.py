"""``TrainingState``: a hand-written loop saved mid-run and resumed continues bit for
bit (model, optimizer moments, scheduler position, dropout's generator, step); the
save is atomic; damaged or mismatched states raise a RecordError naming the fault."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ember import Device, Module, Tensor
from ember.errors import ConfigError, RecordError
from ember.module import Param
from ember.nn import Dropout, Linear, LinearConfig, Relu
from ember.nn.loss import MseLoss
from ember.optim import AdamWConfig, GradientsParams
from ember.optim.lr_scheduler import CosineAnnealingLrSchedulerConfig, ExponentialLrSchedulerConfig
from ember.train import TrainingState


class Net(Module):
    l1: Linear
    act: Relu
    drop: Dropout
    l2: Linear

    def forward(self, x: Tensor) -> Tensor:
        return self.l2(self.drop(self.act(self.l1(x))))


def fresh(device):
    device.seed(0)
    model = Net(l1=LinearConfig(3, 16).init(device), act=Relu(), drop=Dropout(0.3), l2=LinearConfig(16, 1).init(device))
    return model, AdamWConfig(weight_decay=0.1).init(), CosineAnnealingLrSchedulerConfig(1e-2, 10).init()


def data(device):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((32, 3)).astype(np.float32)
    return Tensor.from_data(x, device=device), Tensor.from_data(x.sum(1, keepdims=True), device=device)


def run(model, optim, scheduler, x, y, steps):
    losses = []
    for _ in range(steps):
        loss = MseLoss()(model(x), y)
        losses.append(loss.into_scalar())
        model = optim.step(scheduler.step(), model, GradientsParams.from_grads(loss.backward(), model))
    return model, losses


def weights(model):
    return [p.val().to_numpy() for _, p in model.named_params()]


def test_resume_continues_bit_for_bit(tmp_path):
    device = Device.flex().autodiff()
    x, y = data(device)
    model, optim, scheduler = fresh(device)
    straight, losses = run(model, optim, scheduler, x, y, 8)

    model, optim, scheduler = fresh(device)
    model, first = run(model, optim, scheduler, x, y, 4)
    TrainingState(model, optim, scheduler, step=4, extra={"epoch": 1, "best": first[-1]}).save(
        tmp_path / "state", device
    )
    for _ in range(3):
        Tensor.random([5], device=device)  # the generator moves on before the resume

    model, optim, scheduler = fresh(device)  # a new process would build these afresh
    state = TrainingState.load(tmp_path / "state", model, optim, scheduler, device=device)
    assert state.step == 4 and state.extra == {"epoch": 1, "best": first[-1]}
    resumed, rest = run(state.model, state.optim, state.scheduler, x, y, 4)
    assert first + rest == losses
    for a, b in zip(weights(resumed), weights(straight)):
        np.testing.assert_array_equal(a, b)


def test_save_replaces_atomically(tmp_path, monkeypatch):
    device = Device.flex().autodiff()
    model, optim, scheduler = fresh(device)
    path = tmp_path / "state"
    TrainingState(model, optim, scheduler, step=1).save(path, device)
    assert TrainingState.exists(path)

    def broken(self, file):
        raise OSError("disk full")

    monkeypatch.setattr(type(optim), "save_file", broken)
    with pytest.raises(OSError, match="disk full"):
        TrainingState(model, optim, scheduler, step=2).save(path, device)
    assert json.loads((path / "state.json").read_text())["step"] == 1  # the old state is whole
    assert [p.name for p in tmp_path.iterdir()] == ["state"]  # no temporary left behind


def test_damaged_or_mismatched_states_raise(tmp_path):
    device = Device.flex().autodiff()
    model, optim, scheduler = fresh(device)
    path = tmp_path / "state"
    with pytest.raises(RecordError, match="no training state"):
        TrainingState.load(path, model, optim, scheduler, device=device)
    TrainingState(model, optim, scheduler, step=3).save(path, device)
    with pytest.raises(RecordError, match="ExponentialLrScheduler"):
        TrainingState.load(path, model, optim, ExponentialLrSchedulerConfig(1e-2, 0.9).init(), device=device)
    with pytest.raises(RecordError, match="with a learning-rate scheduler"):
        TrainingState.load(path, model, optim, None, device=device)
    with (path / "model.safetensors").open("r+b") as handle:
        handle.seek(-4, 2)
        handle.write(b"\x00\x01\x02\x03")
    with pytest.raises(RecordError, match="model.safetensors does not match its checksum"):
        TrainingState.load(path, model, optim, scheduler, device=device)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(RecordError, match="not a training state"):
        TrainingState(model, optim, scheduler).save(tmp_path / "other", device)
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"


def test_a_model_of_another_shape_is_refused(tmp_path):
    device = Device.flex().autodiff()
    model, optim, scheduler = fresh(device)
    TrainingState(model, optim, scheduler).save(tmp_path / "state", device)
    other = Net(l1=LinearConfig(3, 8).init(device), act=Relu(), drop=Dropout(0.3), l2=LinearConfig(8, 1).init(device))
    with pytest.raises(RecordError, match="cannot restore the model"):
        TrainingState.load(tmp_path / "state", other, optim, scheduler, device=device)


def test_bad_values_are_refused(tmp_path):
    device = Device.flex().autodiff()
    model, optim, scheduler = fresh(device)
    with pytest.raises(ConfigError, match="JSON"):
        TrainingState(model, optim, scheduler, extra={"x": object()}).save(tmp_path / "s", device)
    with pytest.raises(ConfigError, match="step"):
        TrainingState(model, optim, scheduler, step=-1).save(tmp_path / "s", device)
    with pytest.raises(ConfigError, match="Module"):
        TrainingState(Param.from_tensor(Tensor.ones([1])), optim).save(tmp_path / "s", device)
    assert not (tmp_path / "s").exists()
