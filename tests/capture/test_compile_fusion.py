"""``ember.compile`` on a fusion device (``Device.flex().fusion()``, with or without
autodiff; ``Device.wgpu().fusion()``): the step compiles for the backend under the
fusion decorator (LLVM over flex, WGSL over wgpu) and gives the eager step's losses,
parameters and optimizer states on the plain device; the fusion device's queued ops
run before a step updates its parameters in place; compiled inference, the Learner's
compiled steps and another thread's ops during a trace work there too."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import ember
from ember import Device, Tensor
from ember.backend.fusion.backend import LazyTensor
from ember.backend.fusion.llvm.executor import LLVMPlan
from ember.nn.loss import MseLoss, Reduction
from ember.optim import AdamConfig, GradientsParams, SgdConfig
from tests.capture.test_compile import assert_close, make_step, params_of, seed_problem
from tests.conftest import _gpu_device
from tests.shared_models import Mlp

LRS = [1e-2 * (1.0 + 0.1 * i) for i in range(12)]


def train(device: Device, compiled: bool, steps: int = 12, optim_config=None):
    x, y, model = seed_problem(device)
    optim = (optim_config or AdamConfig()).init()
    step_fn = make_step(optim)
    step = ember.compile(step_fn) if compiled else step_fn
    losses = []
    for i in range(steps):
        model, loss = step(model, x, y, LRS[i])
        losses.append(loss.into_scalar())
    return np.array(losses), model, optim, step


def _only_entry(step):
    (entry,) = step._entries.values()
    return entry


def test_a_training_step_on_a_fusion_device_matches_the_eager_step():
    compiled, model_c, optim_c, step = train(Device.flex().fusion().autodiff(), True)
    eager, model_e, optim_e, _ = train(Device.flex().autodiff(), False)
    assert_close(compiled, eager)
    for a, b in zip(params_of(model_c), params_of(model_e)):
        assert_close(a, b)
    for pc, pe in zip(model_c.params(), model_e.params()):
        state, other = optim_e.states[pe.id], optim_c.states[pc.id]
        assert other.time == state.time == len(LRS)
        assert_close(other.moment_1.to_data().to_numpy(), state.moment_1.to_data().to_numpy())
        assert_close(other.moment_2.to_data().to_numpy(), state.moment_2.to_data().to_numpy())
    # One trace for the first step, one for the rest; the rest compiled by the LLVM
    # executor (whole-step capture is the fusion), holding parameters and moments.
    assert step.stats["traces"] == 2 and step.stats["replays"] == len(LRS) - 2
    entry = _only_entry(step)
    assert isinstance(entry.plan, LLVMPlan) and entry.binding is not None
    # The tensors a step returns are the fusion device's, ready.
    assert all(
        type(p.val()._primitive.inner) is LazyTensor and p.val()._primitive.inner.value is not None
        for p in model_c.params()
    )


def test_two_compiled_runs_on_a_fusion_device_are_bit_identical():
    a = train(Device.flex().fusion().autodiff(), True)[0]
    b = train(Device.flex().fusion().autodiff(), True)[0]
    np.testing.assert_array_equal(a, b)


def test_sgd_with_momentum_on_a_fusion_device_matches_eager():
    config = SgdConfig(momentum=0.9, nesterov=True, weight_decay=1e-3)
    compiled, model_c, _, _ = train(Device.flex().fusion().autodiff(), True, optim_config=config)
    eager, model_e, _, _ = train(Device.flex().autodiff(), False, optim_config=config)
    assert_close(compiled, eager)
    for a, b in zip(params_of(model_c), params_of(model_e)):
        assert_close(a, b)


def test_queued_ops_run_before_a_step_updates_the_parameters_in_place():
    device = Device.flex().fusion().autodiff()
    x, y, model = seed_problem(device)
    step = ember.compile(make_step(AdamConfig().init()))
    for _ in range(5):  # the steady state: parameters held by the plan, updated in place
        model, _ = step(model, x, y, 1e-2)
    assert _only_entry(step).binding is not None
    weight = model.l1.weight.val()
    before = weight.to_data().to_numpy().copy()
    queued = weight.mul_scalar(2.0)  # pending in the fusion device's stream
    model, _ = step(model, x, y, 1e-2)
    after = model.l1.weight.val().to_data().to_numpy()
    assert not np.array_equal(after, before)
    np.testing.assert_array_equal(queued.to_data().to_numpy(), 2.0 * before)


def test_pending_arguments_are_run_before_the_step_reads_them():
    device = Device.flex().fusion().autodiff()
    x, y, model = seed_problem(device)
    eager_x, eager_y, eager_model = seed_problem(Device.flex().autodiff())
    step = ember.compile(make_step(AdamConfig().init()))
    eager_step = make_step(AdamConfig().init())
    for i in range(4):  # new, queued arguments each call
        xi, yi = x.mul_scalar(1.0 + i), y.add_scalar(0.5 * i)
        model, loss = step(model, xi, yi, 1e-2)
        eager_model, eager_loss = eager_step(
            eager_model, eager_x.mul_scalar(1.0 + i), eager_y.add_scalar(0.5 * i), 1e-2
        )
        assert_close(loss.into_scalar(), eager_loss.into_scalar())


@pytest.mark.parametrize("batch", [8, 3])
def test_compiled_inference_on_a_fusion_device_matches_eager(batch):
    fusion, flex = Device.flex().fusion(), Device.flex()
    fusion.seed(3)
    model = Mlp.new(fusion, d_hidden=32, d_output=2)
    reference = model.to_device(flex)
    forward = ember.compile(lambda model, x: model(x).tanh())
    rng = np.random.default_rng(0)
    for _ in range(3):
        data = rng.uniform(-1.0, 1.0, (batch, 4)).astype(np.float32)
        x = Tensor.from_data(data, device=fusion).mul_scalar(2.0)  # queued
        want = reference(Tensor.from_data(data, device=flex).mul_scalar(2.0)).tanh().to_data().to_numpy()
        out = forward(model, x)
        assert out.device == fusion and type(out._primitive) is LazyTensor
        assert_close(out.to_data().to_numpy(), want)
    assert forward.stats["traces"] == 1 and forward.stats["replays"] == 2
    assert isinstance(_only_entry(forward).plan, LLVMPlan)


def test_the_learner_compiles_on_a_fusion_device(tmp_path):
    from tests.train.models import params
    from tests.train.test_learner_compile import run

    eager, eager_losses, _ = run(tmp_path / "eager", False, epochs=1)
    fusion = Device.flex().fusion().autodiff()
    compiled, compiled_losses, learner = run(tmp_path / "compiled", True, epochs=1, device=fusion)
    for split in ("train", "valid"):
        np.testing.assert_allclose(compiled_losses[split], eager_losses[split], rtol=1e-5)
    for key, value in params(eager.model).items():
        np.testing.assert_allclose(params(compiled.model)[key], value, rtol=1e-5, atol=1e-6)
    stats = learner.compiled.stats()
    assert stats["update"]["eager"] == 0 and stats["valid"]["eager"] == 0
    # one trace, the steady state's: the first step (no optimizer moments yet) runs
    # eagerly, as does the last, smaller batch (see ember/train/compiled_steps.py)
    update = stats["update"]
    assert update["traces"] == 1 and update["first"] == 1 and update["replays"] >= 2 and update["ragged"] == 1


def test_other_threads_use_the_fusion_device_while_a_function_is_traced():
    device = Device.flex().fusion().autodiff()
    x, y, model = seed_problem(device)
    optim = SgdConfig().init()
    started, release = threading.Event(), threading.Event()
    results = {}

    def other_thread():
        started.wait(10)
        a = Tensor.from_floats([1.0, 2.0, 3.0], device=device)
        results["sum"] = a.mul_scalar(2.0).sum().into_scalar()  # queued and run while the trace is open
        release.set()

    def train_step(model, x, y):
        loss = MseLoss().forward(model(x), y, Reduction.MEAN)
        started.set()
        release.wait(10)
        return optim.step(1e-2, model, GradientsParams.from_grads(loss.backward(), model)), loss

    worker = threading.Thread(target=other_thread)
    worker.start()
    step = ember.compile(train_step)
    model, loss = step(model, x, y)
    worker.join(10)
    assert results == {"sum": 12.0} and step.stats["eager"] == 0
    eager_x, eager_y, eager_model = seed_problem(Device.flex().autodiff())
    eager = MseLoss().forward(eager_model(eager_x), eager_y, Reduction.MEAN)
    assert_close(loss.into_scalar(), eager.into_scalar())


def test_a_training_step_on_a_wgpu_fusion_device_matches_the_eager_step():
    from ember.backend.fusion.wgsl.executor import CubePlan

    gpu = _gpu_device()
    compiled, model_c, _, step = train(gpu.fusion().autodiff(), True, steps=6)
    eager, model_e, _, _ = train(gpu.autodiff(), False, steps=6)
    assert_close(compiled, eager)
    for a, b in zip(params_of(model_c), params_of(model_e)):
        assert_close(a, b)
    assert isinstance(_only_entry(step).plan, CubePlan)


@pytest.mark.filterwarnings("ignore::ember.capture.CompileWarning")
def test_reading_an_arguments_value_runs_eagerly_not_baked_into_the_plan():
    """A Python branch on an argument's value: a graph break (eager calls, each taking
    the branch its argument selects), as on plain devices. A ready fusion tensor once
    gave the trace its value, and the plan replayed the first call's branch."""
    fusion = Device.flex().fusion()

    @ember.compile
    def choose(x, flag):
        return x * 2.0 if bool(flag.to_numpy()) else x - 1.0

    x = Tensor.from_data(np.ones(3, np.float32), device=fusion)
    for flag, want in ((True, 2.0), (False, 0.0), (True, 2.0)):
        got = choose(x, Tensor.from_data(np.array(flag), device=fusion)).to_numpy()
        np.testing.assert_array_equal(got, np.full(3, want, np.float32))
    assert choose.stats["eager"] == 3 and choose.stats["traces"] == 0
