"""A module a compiled function reads but does not return (a decode step's model):
after the first runs, calls with the same module and new tensors take a specialized
run that reads its parameters straight from them; another module of the same
structure, or one whose parameters another step returned, is still read correctly."""

from __future__ import annotations

import gc

import numpy as np

import ember
from ember import Device, Tensor
from ember.nn import LinearConfig, Relu
from ember.nn.loss import MseLoss, Reduction
from ember.optim import GradientsParams, SgdConfig
from tests.conftest import assert_close
from tests.shared_models import Mlp


def _mlp(device: Device) -> Mlp:
    return Mlp(l1=LinearConfig(4, 8).init(device), act=Relu(), l2=LinearConfig(8, 3).init(device))


def test_a_read_module_takes_the_specialized_run(rng):
    flex = Device.flex()
    model, other = _mlp(flex), _mlp(flex)

    @ember.compile
    def step(model, x):
        return model(x)

    for i in range(6):
        for m in (model, model, other) if i % 2 else (model,):
            x = Tensor.from_data(rng.standard_normal((2, 4)).astype(np.float32), device=flex)
            assert_close(step(m, x), m(x).to_numpy(), atol=1e-5)
    # One trace per module (their parameters differ), each with the specialized run.
    assert step.stats["traces"] == 2 and step.stats["eager"] == 0
    assert all("leaves_of" in entry.code for entry in step._entries.values())


def test_a_module_that_dies_is_not_mistaken_for_a_new_one(rng):
    flex = Device.flex()

    @ember.compile
    def step(model, x):
        return model(x)

    x = Tensor.from_data(rng.standard_normal((2, 4)).astype(np.float32), device=flex)
    model = _mlp(flex)
    want = model(x).to_numpy()
    for _ in range(4):
        # Another module object holding the same parameters: the same trace, read anew.
        model = model.replace(act=Relu())
        for _ in range(3):
            assert_close(step(model, x), want, atol=1e-5)
        gc.collect()
    assert step.stats["traces"] == 1


def test_a_trained_model_is_read_after_the_training_step_updates_it(rng):
    device = Device.flex().autodiff()
    model = _mlp(device)
    optim = SgdConfig().init()

    @ember.compile
    def train(model, x):
        loss = MseLoss().forward(model(x), x.narrow(1, 0, 3), Reduction.MEAN)
        return optim.step(0.1, model, GradientsParams.from_grads(loss.backward(), model))

    @ember.compile
    def infer(model, x):
        return model(x)

    x = Tensor.from_data(rng.standard_normal((2, 4)).astype(np.float32), device=device)
    for _ in range(4):
        model = train(model, x)
        for _ in range(2):
            assert_close(infer(model, x), model(x).to_numpy(), atol=1e-5)
