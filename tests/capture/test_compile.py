"""``ember.compile``: captured training steps against eager ones."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ember
from ember import Device, Distribution, Module, Tensor
from ember.capture import CompileWarning, RecompileWarning
from ember.module import ParamGroup
from ember.nn import (
    BatchNorm,
    BatchNormConfig,
    Conv2d,
    Conv2dConfig,
    Dropout,
    DropoutConfig,
    Linear,
    LinearConfig,
    MaxPool2d,
    MaxPool2dConfig,
    Relu,
)
from ember.nn.loss import CrossEntropyLossConfig, MseLoss, Reduction
from ember.optim import (
    AdadeltaConfig,
    AdaGradConfig,
    AdamaxConfig,
    AdamConfig,
    AdamWConfig,
    AdanConfig,
    GradientsParams,
    LambConfig,
    LionConfig,
    MuonConfig,
    NAdamConfig,
    RAdamConfig,
    RmsPropConfig,
    SgdConfig,
)
from tests.shared_models import Mlp

REL = 1e-5  # compiled against eager (exact with the replay executor; LLVM may reorder)


def seed_problem(device: Device, batch: int = 64):
    device.seed(42)
    x = Tensor.random([batch, 4], Distribution.uniform(-1.0, 1.0), device=device)
    y = x.matmul(Tensor.from_floats([[1.0], [-2.0], [0.5], [3.0]], device=device)).add_scalar(0.5)
    model = Mlp(l1=LinearConfig(4, 16).init(device), act=Relu(), l2=LinearConfig(16, 1).init(device))
    for p in model.params():
        p.val()
    return x, y, model


def make_step(optim):
    def train_step(model, x, y, lr):
        loss = MseLoss().forward(model(x), y, Reduction.MEAN)
        grads = GradientsParams.from_grads(loss.backward(), model)
        return optim.step(lr, model, grads), loss

    return train_step


def train(optim_config, steps: int, compiled: bool, lrs=None, device=None):
    device = device or Device.flex().autodiff()
    x, y, model = seed_problem(device)
    optim = optim_config.init() if not isinstance(optim_config, ember.optim.ModuleOptimizer) else optim_config
    step_fn = make_step(optim)
    step = ember.compile(step_fn) if compiled else step_fn
    losses = []
    for i in range(steps):
        model, loss = step(model, x, y, 1e-2 if lrs is None else lrs[i])
        losses.append(loss.into_scalar())
    return np.array(losses), model, optim, step


def params_of(model):
    return [p.val().to_data().to_numpy() for p in model.params()]


def assert_close(a, b, rel=REL):
    np.testing.assert_allclose(a, b, rtol=rel, atol=1e-7)


def test_seed_step_matches_eager():
    compiled, model_c, optim_c, step = train(AdamConfig(), 200, True)
    eager, model_e, optim_e, _ = train(AdamConfig(), 200, False)
    assert_close(compiled, eager)
    for a, b in zip(params_of(model_c), params_of(model_e)):
        assert_close(a, b)
    for pc, pe in zip(model_c.params(), model_e.params()):  # ids differ between the two runs
        state, other = optim_e.states[pe.id], optim_c.states[pc.id]
        assert other.time == state.time == 200
        assert_close(other.moment_1.to_data().to_numpy(), state.moment_1.to_data().to_numpy())
        assert_close(other.moment_2.to_data().to_numpy(), state.moment_2.to_data().to_numpy())
    # One trace for the first step (no optimizer state yet), one for the rest.
    assert step.stats["traces"] == 2 and step.stats["replays"] == 198 and step.cache_size() == 1


def test_two_compiled_runs_are_bit_identical():
    a = train(AdamConfig(), 30, True)[0]
    b = train(AdamConfig(), 30, True)[0]
    np.testing.assert_array_equal(a, b)


def test_the_returned_model_is_not_rebuilt_per_step():
    device = Device.flex().autodiff()
    x, y, model = seed_problem(device)
    step = ember.compile(make_step(AdamConfig().init()))
    returned = []
    for _ in range(5):
        model, _ = step(model, x, y, 1e-2)
        returned.append(model)
    assert all(m is returned[-1] for m in returned[1:])  # donated: updated in place


@pytest.mark.parametrize(
    "config",
    [
        SgdConfig(momentum=0.9, nesterov=True, weight_decay=1e-3),
        AdamConfig(amsgrad=True),
        AdamWConfig(weight_decay=1e-2),
        AdaGradConfig(),
        RmsPropConfig(momentum=0.5, centered=True),
        AdanConfig(),
        AdadeltaConfig(),
        AdamaxConfig(weight_decay=1e-3),
        NAdamConfig(),
        RAdamConfig(),
        LionConfig(),
        LambConfig(weight_decay=1e-2),
    ],
    ids=lambda c: type(c).__name__,
)
def test_every_optimizer_matches_eager(config):
    """200 steps (RAdam's rectification switches on at step 6; warm-ups pass): the loss
    curve, the parameters and two compiled runs."""
    lrs = [1e-3 * min(1.0, (i + 1) / 20) for i in range(200)]
    compiled, model_c, _, step = train(config, 200, True, lrs)
    eager, model_e, _, _ = train(config, 200, False, lrs)
    assert_close(compiled, eager)
    for a, b in zip(params_of(model_c), params_of(model_e)):
        assert_close(a, b)
    assert step.stats["eager"] == 0
    np.testing.assert_array_equal(compiled, train(config, 200, True, lrs)[0])


def test_every_optimizer_config_is_covered():
    tested = {type(c) for c in test_every_optimizer_matches_eager.pytestmark[0].args[1]} | {MuonConfig}
    configs = {getattr(ember.optim, n) for n in dir(ember.optim) if n.endswith("Config") and n != "OptimizerConfig"}
    assert configs <= tested, sorted(c.__name__ for c in configs - tested)


def test_muon_with_a_group_matches_eager():
    def optim():
        return MuonConfig().init().with_group(ParamGroup.contains("bias"), AdamWConfig())

    compiled = train(optim(), 20, True)[0]
    eager = train(optim(), 20, False)[0]
    assert_close(compiled, eager)


def test_learning_rate_is_a_run_time_scalar():
    lrs = [1e-2 * (0.9**i) for i in range(40)]
    compiled, _, _, step = train(AdamConfig(), 40, True, lrs)
    eager = train(AdamConfig(), 40, False, lrs)[0]
    assert_close(compiled, eager)
    assert step.stats["traces"] == 2  # a new rate per step, no new trace


def test_a_branch_on_a_scalar_is_a_guard():
    device = Device.flex().autodiff()
    x, y, model = seed_problem(device)
    optim = SgdConfig().init()

    def train_step(model, x, y, lr):
        loss = MseLoss().forward(model(x), y, Reduction.MEAN)
        if lr > 0.05:  # a Python branch on a run-time scalar
            loss = loss.mul_scalar(0.5)
        return optim.step(lr, model, GradientsParams.from_grads(loss.backward(), model)), loss

    step = ember.compile(train_step)
    eager_model = seed_problem(device)[2]
    eager_optim = SgdConfig().init()
    for lr in [0.01, 0.02, 0.1, 0.2, 0.01]:
        model, loss = step(model, x, y, lr)
        eager_loss = MseLoss().forward(eager_model(x), y, Reduction.MEAN)
        if lr > 0.05:
            eager_loss = eager_loss.mul_scalar(0.5)
        eager_model = eager_optim.step(lr, eager_model, GradientsParams.from_grads(eager_loss.backward(), eager_model))
        assert_close(loss.into_scalar(), eager_loss.into_scalar())
    assert step.stats["retraces"] >= 2  # crossing 0.05 and back


def test_guard_misses_retrace_and_the_cache_is_bounded():
    device = Device.flex().autodiff()
    x, y, model = seed_problem(device)
    step = ember.compile(make_step(SgdConfig().init()), max_traces=1)
    with pytest.warns(RecompileWarning, match="max_traces"):  # once, at the first eviction
        for batch in (64, 32, 64):
            xb, yb = x.slice([(0, batch)]), y.slice([(0, batch)])
            model, loss = step(model, xb, yb, 1e-2)
            assert loss.dims() == [1]
    assert step.cache_size() == 1 and step.stats["evictions"] >= 2


def test_a_graph_break_runs_eagerly_with_one_warning():
    device = Device.flex().autodiff()
    x, y, model = seed_problem(device)
    optim = SgdConfig().init()
    seen = []

    def train_step(model, x, y):
        loss = MseLoss().forward(model(x), y, Reduction.MEAN)
        seen.append(loss.into_scalar())  # reads a value while traced: a graph break
        return optim.step(1e-2, model, GradientsParams.from_grads(loss.backward(), model)), loss

    step = ember.compile(train_step)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            model, loss = step(model, x, y)
    compile_warnings = [w for w in caught if issubclass(w.category, CompileWarning)]
    assert len(compile_warnings) == 1 and "reads a tensor's value" in str(compile_warnings[0].message)
    assert step.stats["eager"] == 3 and len(seen) == 3
    eager = train(SgdConfig(), 3, False)[0]
    assert_close(np.array(seen), eager)


def test_switching_between_compiled_and_eager_steps():
    device = Device.flex().autodiff()
    x, y, model = seed_problem(device)
    optim = AdamConfig().init()
    fn = make_step(optim)
    step = ember.compile(fn)
    losses = []
    for i in range(30):
        model, loss = (step if i // 10 != 1 else fn)(model, x, y, 1e-2)
        losses.append(loss.into_scalar())
    assert_close(np.array(losses), train(AdamConfig(), 30, False)[0])


def test_save_and_resume_after_compiled_steps(tmp_path):
    device = Device.flex().autodiff()
    x, y, model = seed_problem(device)
    optim = AdamConfig().init()
    step = ember.compile(make_step(optim))
    for _ in range(10):
        model, _ = step(model, x, y, 1e-2)
    model.save_file(tmp_path / "model.safetensors")
    optim.save_file(tmp_path / "optim.safetensors")
    _, _, fresh = seed_problem(device)
    fresh = fresh.load_file(tmp_path / "model.safetensors")
    fresh_optim = AdamConfig().init().load_file(tmp_path / "optim.safetensors", device)
    resumed_step = make_step(fresh_optim)
    losses = []
    for _ in range(10):
        fresh, loss = resumed_step(fresh, x, y, 1e-2)
        losses.append(loss.into_scalar())
    assert_close(np.array(losses), train(AdamConfig(), 20, False)[0][10:])


def test_a_model_that_was_not_returned_by_the_step_is_read_afresh():
    device = Device.flex().autodiff()
    x, y, model = seed_problem(device)
    optim = SgdConfig().init()
    step = ember.compile(make_step(optim))
    for _ in range(3):
        model, _ = step(model, x, y, 1e-2)
    # A model built elsewhere with the same ids (e.g. loaded) is read, not ignored.
    _, _, other = seed_problem(device)
    other = other.map_params(lambda p, path: type(p)(p.id, p.val().mul_scalar(0.0), p.require_grad))
    returned, loss = step(other, x, y, 1e-2)
    expected = MseLoss().forward(other(x), y, Reduction.MEAN).into_scalar()
    assert_close(loss.into_scalar(), expected)


class Cnn(Module):
    conv1: Conv2d
    bn: BatchNorm
    conv2: Conv2d
    pool: MaxPool2d
    drop: Dropout
    fc: Linear

    def forward(self, x: Tensor) -> Tensor:
        x = self.pool(self.bn(self.conv1(x)).clamp_min(0.0))
        x = self.pool(self.conv2(x).clamp_min(0.0))
        return self.fc(self.drop(x.flatten(1, 3)))


def test_cnn_with_batch_norm_and_dropout_matches_eager():
    def run(compiled: bool):
        device = Device.flex().autodiff()
        device.seed(1)
        x = Tensor.random([16, 1, 12, 12], Distribution.normal(0.0, 1.0), device=device)
        y = Tensor.from_ints([i % 10 for i in range(16)], device=device)
        model = Cnn(
            conv1=Conv2dConfig((1, 8), (3, 3), padding=(1, 1)).init(device),
            bn=BatchNormConfig(8).init(device),
            conv2=Conv2dConfig((8, 8), (3, 3), padding=(1, 1)).init(device),
            pool=MaxPool2dConfig((2, 2)).init(),
            drop=DropoutConfig(0.2).init(),
            fc=LinearConfig(72, 10).init(device),
        )
        for p in model.params():
            p.val()
        optim = AdamConfig().init()
        ce = CrossEntropyLossConfig().init(device)

        def train_step(model, x, y):
            loss = ce.forward(model(x), y)
            return optim.step(1e-2, model, GradientsParams.from_grads(loss.backward(), model)), loss

        step = ember.compile(train_step) if compiled else train_step
        losses = []
        for _ in range(8):
            model, loss = step(model, x, y)
            losses.append(loss.into_scalar())
        return np.array(losses), model.bn.running_var.value().to_data().to_numpy()

    compiled, var_c = run(True)
    eager, var_e = run(False)
    assert_close(compiled, eager)  # dropout masks drawn in the same order from the device
    assert_close(var_c, var_e)  # batch-norm statistics written back


def test_transformer_encoder_step_matches_eager():
    from ember.nn import TransformerEncoderConfig

    def run(compiled: bool):
        device = Device.flex().autodiff()
        device.seed(3)
        x = Tensor.random([4, 6, 16], Distribution.normal(0.0, 1.0), device=device)
        target = Tensor.random([4, 6, 16], Distribution.normal(0.0, 1.0), device=device)
        model = TransformerEncoderConfig(16, 32, 4, 2, dropout=0.0).init(device)
        for p in model.params():
            p.val()
        optim = AdamWConfig().init()

        def train_step(model, x, target):
            loss = MseLoss().forward(model(x), target, Reduction.MEAN)
            return optim.step(1e-3, model, GradientsParams.from_grads(loss.backward(), model)), loss

        step = ember.compile(train_step) if compiled else train_step
        losses = []
        for _ in range(200):
            model, loss = step(model, x, target)
            losses.append(loss.into_scalar())
        return np.array(losses), getattr(step, "stats", None)

    compiled, stats = run(True)
    assert_close(compiled, run(False)[0])
    assert stats["eager"] == 0


def test_compile_as_a_decorator_and_plain_functions():
    @ember.compile
    def double(t: Tensor, factor: float) -> Tensor:
        return t.mul_scalar(factor).add(t)

    t = Tensor.from_floats([1.0, 2.0], device=Device.flex())
    assert double(t, 2.0).to_data().tolist() == [3.0, 6.0]
    assert double(t, 3.0).to_data().tolist() == [4.0, 8.0]
    assert double.stats["traces"] == 1

    @ember.compile(max_traces=2)
    def total(t: Tensor) -> Tensor:
        return t.sum()

    assert total(t).into_scalar() == 3.0


def test_other_threads_run_eagerly_while_a_function_is_traced():
    import threading

    device = Device.flex().autodiff()
    x, y, model = seed_problem(device)
    optim = SgdConfig().init()
    started, release = threading.Event(), threading.Event()
    results = {}

    def other_thread():
        started.wait(10)
        a = Tensor.from_floats([1.0, 2.0, 3.0], device=device)
        results["sum"] = a.mul_scalar(2.0).sum().into_scalar()  # runs while the trace is open
        results["random"] = Tensor.random([2], Distribution.uniform(0.0, 1.0), device=device).dims()
        release.set()

    def train_step(model, x, y):
        loss = MseLoss().forward(model(x), y, Reduction.MEAN)
        started.set()
        release.wait(10)  # the other thread works in the middle of this trace
        return optim.step(1e-2, model, GradientsParams.from_grads(loss.backward(), model)), loss

    worker = threading.Thread(target=other_thread)
    worker.start()
    step = ember.compile(train_step)
    model, loss = step(model, x, y)
    worker.join(10)
    assert results == {"sum": 12.0, "random": [2]}
    assert step.stats["eager"] == 0
    assert_close(loss.into_scalar(), train(SgdConfig(), 1, False)[0][0])


def test_a_module_read_each_call_is_walked_once_and_a_replaced_module_is_seen(monkeypatch):
    """A module passed and not returned (a decode step's model) is walked once, not
    per call; a module with a field replaced (a new value) is seen by the next call."""
    from ember.nn import LinearConfig

    class Net(Module):
        a: Linear
        b: Linear

        def forward(self, x):
            return self.b(self.a(x))

    device = Device.flex()
    net = Net(a=LinearConfig(4, 4).init(device), b=LinearConfig(4, 2).init(device))
    step = ember.compile(lambda m, x: m(x).sum())
    walks = []
    visit = Module.visit
    monkeypatch.setattr(Module, "visit", lambda self, *a, **k: (walks.append(type(self)), visit(self, *a, **k))[1])
    rng = np.random.default_rng(0)
    for _ in range(5):
        x = Tensor.from_data(rng.standard_normal((3, 4)).astype(np.float32), device=device)
        np.testing.assert_allclose(step(net, x).into_scalar(), net(x).sum().into_scalar(), rtol=1e-5)
    assert walks.count(Net) <= 2  # the trace's walks, not one per call
    net = net.replace(b=LinearConfig(4, 2).init(device))  # new parameters: seen, not stale
    np.testing.assert_allclose(step(net, x).into_scalar(), net(x).sum().into_scalar(), rtol=1e-5)
