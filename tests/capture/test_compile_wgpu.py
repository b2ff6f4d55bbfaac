"""``ember.compile`` on wgpu: steps lowered to WGSL and replayed from a tape, against
eager cube steps (the seed MLP, an MLP with cross-entropy, the CNN with batch norm
and dropout), with changing learning rates and random draws; launches and submits
per step; plans whose recording read something back keep running launch by launch."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import Distribution, Tensor
from ember.backend.fusion.wgsl import CubeExecutor
from ember.nn import BatchNormConfig, Conv2dConfig, DropoutConfig, LinearConfig, MaxPool2dConfig, Relu
from ember.nn.loss import CrossEntropyLossConfig
from ember.optim import AdamConfig, GradientsParams, SgdConfig
from tests.capture.test_compile import Cnn, Mlp, assert_close, make_step, params_of, seed_problem
from tests.conftest import _gpu_device


@pytest.fixture
def gpu():
    return _gpu_device().autodiff()


def train(device, steps: int, compiled: bool, optim_config=None, lrs=None, executor=None, keep: bool = False):
    x, y, model = seed_problem(device)
    optim = (optim_config or AdamConfig()).init()
    step_fn = make_step(optim)
    step = ember.compile(step_fn, executor=executor) if compiled else step_fn
    losses = []
    for i in range(steps):
        model, loss = step(model, x, y, 1e-2 if lrs is None else lrs[i])
        losses.append(loss if keep else loss.into_scalar())
    if keep:
        losses = [loss.into_scalar() for loss in losses]
    return np.array(losses), model, optim, step


def test_seed_step_matches_eager_and_replays_a_tape(gpu):
    executor = CubeExecutor()
    compiled, model_c, optim_c, step = train(gpu, 40, True, executor=executor)
    eager, model_e, optim_e, _ = train(gpu, 40, False)
    assert_close(compiled, eager)
    for a, b in zip(params_of(model_c), params_of(model_e)):
        assert_close(a, b)
    for pc, pe in zip(model_c.params(), model_e.params()):
        state, other = optim_e.states[pe.id], optim_c.states[pc.id]
        assert other.time == state.time == 40
        assert_close(other.moment_2.to_data().to_numpy(), state.moment_2.to_data().to_numpy())
    # Steps 1 (no optimizer state) and 2 are their traces' first runs (replayed op by op,
    # the executor plans an entry from its second run), step 3 runs its launches, step 4
    # records them, the rest replay the tape.
    assert step.stats["traces"] == 2 and executor.stats["tapes"] == 1 and executor.stats["replays"] == 36


def test_two_compiled_runs_are_bit_identical(gpu):
    a = train(gpu, 12, True, executor=CubeExecutor())[0]
    b = train(gpu, 12, True, executor=CubeExecutor())[0]
    np.testing.assert_array_equal(a, b)


def test_a_step_is_one_submit_and_few_launches(gpu):
    """W1 on wgpu: the replayed step launches its fused kernels (eight: the forward's two
    matmuls with bias and ReLU in the first's epilogue, the loss and its gradient in one
    reduction, the backward's three matmuls, two of them with their weight's Adam update
    as their epilogue, the ReLU mask, the bias updates inside their gradients'
    reductions), allocates nothing, and submits once, at the read-back of the loss."""
    x, y, model = seed_problem(gpu)
    step = ember.compile(make_step(AdamConfig().init()), executor=CubeExecutor())
    cube = gpu.inner().backend
    for _ in range(4):
        model, loss = step(model, x, y, 1e-2)
        loss.into_scalar()
    for _ in range(3):
        cube.reset_stats()
        model, loss = step(model, x, y, 1e-2)
        during = cube.stats()
        loss.into_scalar()
        after = cube.stats()
        assert during["submits"] == 0 and after["submits"] == 1
        assert during["launches"] == 8 and during["buffers"] == 0 and during["compiles"] == 0


def test_learning_rate_schedule_and_sgd(gpu):
    lrs = [0.05 * 0.8**i for i in range(10)]
    for config in (AdamConfig(), SgdConfig()):
        compiled = train(gpu, 10, True, config, lrs, executor=CubeExecutor())[0]
        assert_close(compiled, train(gpu, 10, False, config, lrs)[0])


def test_results_kept_across_steps_are_not_overwritten(gpu):
    """Each replay writes buffers nobody holds: losses kept as tensors (more than a tape
    keeps buffers for) read the values of their own steps."""
    executor = CubeExecutor()
    compiled = train(gpu, 12, True, executor=executor, keep=True)[0]
    assert_close(compiled, train(gpu, 12, False)[0])
    assert executor.stats["replays"] == 8


def test_mlp_with_cross_entropy(gpu):
    def run(compiled: bool):
        gpu.seed(5)
        x = Tensor.random([32, 20], Distribution.normal(0.0, 1.0), device=gpu)
        y = Tensor.from_ints([i % 7 for i in range(32)], device=gpu)
        model = Mlp(l1=LinearConfig(20, 24).init(gpu), act=Relu(), l2=LinearConfig(24, 7).init(gpu))
        optim = AdamConfig().init()
        ce = CrossEntropyLossConfig().init(gpu)

        def train_step(model, x, y):
            loss = ce.forward(model(x), y)
            return optim.step(1e-2, model, GradientsParams.from_grads(loss.backward(), model)), loss

        step = ember.compile(train_step, executor=CubeExecutor()) if compiled else train_step
        losses = []
        for _ in range(8):
            model, loss = step(model, x, y)
            losses.append(loss.into_scalar())
        return np.array(losses), params_of(model)

    (compiled, pc), (eager, pe) = run(True), run(False)
    assert_close(compiled, eager)
    for a, b in zip(pc, pe):
        assert_close(a, b)


def test_cnn_with_batch_norm_and_dropout(gpu):
    """Convolutions, pooling, gathers and scatters are cube calls inside the tape; the
    dropout masks are drawn at each replay from the device's generator (the random
    call reruns dry for its parameter words)."""

    def run(compiled: bool):
        executor = CubeExecutor()
        gpu.seed(1)
        x = Tensor.random([8, 1, 12, 12], Distribution.normal(0.0, 1.0), device=gpu)
        y = Tensor.from_ints([i % 10 for i in range(8)], device=gpu)
        model = Cnn(
            conv1=Conv2dConfig((1, 4), (3, 3), padding=(1, 1)).init(gpu),
            bn=BatchNormConfig(4).init(gpu),
            conv2=Conv2dConfig((4, 8), (3, 3), padding=(1, 1)).init(gpu),
            pool=MaxPool2dConfig((2, 2)).init(),
            drop=DropoutConfig(0.3).init(),
            fc=LinearConfig(72, 10).init(gpu),
        )
        for p in model.params():
            p.val()
        optim = AdamConfig().init()
        ce = CrossEntropyLossConfig().init(gpu)

        def train_step(model, x, y):
            loss = ce.forward(model(x), y)
            return optim.step(1e-2, model, GradientsParams.from_grads(loss.backward(), model)), loss

        step = ember.compile(train_step, executor=executor) if compiled else train_step
        losses = []
        for _ in range(6):
            model, loss = step(model, x, y)
            losses.append(loss.into_scalar())
        return np.array(losses), model.bn.running_var.value().to_data().to_numpy(), executor

    compiled, var_c, executor = run(True)
    eager, var_e, _ = run(False)
    assert_close(compiled, eager)
    assert_close(var_c, var_e)
    assert executor.stats["tapes"] == 1 and executor.stats["replays"] == 2


def noisy(x: Tensor) -> Tensor:
    noise = Tensor.random(x.dims(), Distribution.normal(0.0, 1.0), device=x.device)
    mask = Tensor.random(x.dims(), Distribution.bernoulli(0.5), device=x.device)
    return x.add(noise).mul(mask)


def test_random_draws_are_new_at_each_replay():
    device = _gpu_device()
    executor = CubeExecutor()
    compiled = ember.compile(noisy, executor=executor)

    def calls(fn) -> tuple[list[bytes], dict]:
        device.seed(4)
        x = Tensor.ones([3, 5], device=device)
        return [fn(x).to_data().to_numpy().tobytes() for _ in range(6)], device.rng_state()

    got, state = calls(compiled)
    want, want_state = calls(noisy)
    assert got == want and state == want_state and len(set(got)) == 6
    assert executor.stats["replays"] == 3


def test_a_plan_that_reads_back_runs_launch_by_launch():
    """A gather whose indices are computed in the step needs its index check's
    read-back: that plan records no tape and keeps running its launches."""
    device = _gpu_device()
    executor = CubeExecutor()

    def pick(x: Tensor) -> Tensor:
        index = x.greater_elem(0.0).int()  # values known only on the device
        return x.gather(1, index).mul_scalar(2.0)

    compiled = ember.compile(pick, executor=executor)
    rng = np.random.default_rng(3)
    for _ in range(4):
        a = rng.standard_normal((4, 3)).astype(np.float32)
        got = compiled(Tensor.from_data(a, device=device)).to_data().to_numpy()
        np.testing.assert_allclose(got, np.take_along_axis(a, (a > 0).astype(int), 1) * 2.0)
    assert executor.stats["tapes"] == 0 and executor.stats["untaped"] == 1 and executor.stats["replays"] == 0
