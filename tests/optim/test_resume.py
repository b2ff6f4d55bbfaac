"""A run resumed from saved (model, optimizer, scheduler, RNG) is bit-identical to an
uninterrupted one."""

from __future__ import annotations

import pytest

from ember import Device, Distribution, Tensor
from ember.errors import ConfigError, RecordError
from ember.nn.loss import MseLoss, Reduction
from ember.optim import AdamConfig, GradientsParams, SgdConfig
from ember.optim.lr_scheduler import LinearLrSchedulerConfig
from tests.shared_models import Mlp


def _setup(device):
    device.seed(42)
    x = Tensor.random([64, 4], Distribution.uniform(-1.0, 1.0), device=device)
    y = x.matmul(Tensor.from_floats([[1.0], [-2.0], [0.5], [3.0]], device=device)).add_scalar(0.5)
    return x, y


def _train(device, steps, tmp_path=None, resume_at=None, optimizer=None):
    optimizer = optimizer or AdamConfig()
    x, y = _setup(device)
    model, optim = Mlp.new(device), optimizer.init()
    scheduler = LinearLrSchedulerConfig(1e-2, 1e-3, steps).init()
    losses = []
    for step in range(steps):
        if step == resume_at:
            model.save_file(tmp_path / "model.safetensors")
            optim.save_file(tmp_path / "optim.safetensors")
            record, rng = scheduler.to_record(), device.rng_state()
            # Start over from nothing but the files, as a new process would.
            device.seed(0)
            model = Mlp.new(device).load_file(tmp_path / "model.safetensors")
            optim = optimizer.init().load_file(tmp_path / "optim.safetensors", device)
            scheduler = LinearLrSchedulerConfig(1e-2, 1e-3, steps).init().load_record(record)
            device.set_rng_state(rng)
        noise = Tensor.random([64, 1], Distribution.normal(0.0, 0.01), device=device)  # uses the RNG every step
        loss = MseLoss().forward(model(x), y.add(noise), Reduction.MEAN)
        losses.append(loss.into_scalar())
        grads = GradientsParams.from_grads(loss.backward(), model)
        model = optim.step(scheduler.step(), model, grads)
    return losses


@pytest.mark.parametrize(
    "optimizer", [AdamConfig(), AdamConfig(amsgrad=True), SgdConfig(momentum=0.9)], ids=["adam", "amsgrad", "sgd"]
)
def test_resume_is_bit_identical(tmp_path, optimizer):
    device = Device.flex().autodiff()
    uninterrupted = _train(device, 30, optimizer=optimizer)
    resumed = _train(device, 30, tmp_path, resume_at=13, optimizer=optimizer)
    assert resumed == uninterrupted
    assert uninterrupted[-1] < uninterrupted[0]


def test_optimizer_record_errors(tmp_path):
    device = Device.flex().autodiff()
    x, y = _setup(device)
    model, optim = Mlp.new(device), AdamConfig().init()
    loss = MseLoss().forward(model(x), y)
    optim.step(1e-2, model, GradientsParams.from_grads(loss.backward(), model))
    optim.save_file(tmp_path / "adam.safetensors")
    with pytest.raises(ConfigError, match="does not match this optimizer"):
        SgdConfig(momentum=0.9).init().load_file(tmp_path / "adam.safetensors", device)
    (tmp_path / "broken.safetensors").write_bytes(b"\x00" * 4)
    with pytest.raises(RecordError, match="truncated"):
        AdamConfig().init().load_file(tmp_path / "broken.safetensors", device)
