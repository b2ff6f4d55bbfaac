"""Convolution chains (``ember.backend.fusion.chains``): a conv, the elementwise kernel
reading its output and a max pooling run per sample as one step. Against the
unfused lowering (bit for bit), flex (the replay), and eager training steps."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import Device, Distribution, Module, Tensor
from ember.backend.flex import FlexBackend
from ember.backend.fusion.chains import fuse_conv_chains
from ember.backend.fusion.llvm import LLVMExecutor
from ember.backend.fusion.scheduler import Call, Library
from ember.backend.fusion.steps import ConvChain
from ember.backend.kernel.steps import Kernel
from ember.backend.ops import BinaryOp, ReduceOp, UnaryOp
from ember.nn import Conv2dConfig, Linear, LinearConfig, MaxPool2dConfig, Relu
from ember.nn.loss import CrossEntropyLoss
from ember.optim import AdamConfig, GradientsParams
from tests.fusion.oracle import FLOATS, Case, assert_same


@pytest.fixture(scope="module")
def chained():
    return LLVMExecutor()


@pytest.fixture(scope="module")
def unchained():
    return LLVMExecutor(conv_chains=False)


def _chains(plan) -> list[ConvChain]:
    return [s for s in plan.schedule.steps if isinstance(s, ConvChain)]


def _run_both(case: Case, outs, chained, unchained):
    """(chained results, unchained results, replayed results, chained plan)."""
    compiled, replayed, plan = case.run(chained, outs)
    graph, scalars = case.abstract(outs)
    plain_plan = unchained.plan(graph)
    plain = [np.array(a) for a in plain_plan.run(FlexBackend(), list(case.values), scalars)]
    assert not _chains(plain_plan)
    return compiled, plain, replayed, plan


def _close(a: np.ndarray, e: np.ndarray) -> None:
    """BLAS against numpy's convolution: the existing conv tests' tolerance."""
    tol = 2e-5 if a.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(a, e, rtol=tol, atol=tol * max(np.abs(e).max(), 1.0))


def _check_indices(x: np.ndarray, pooled: np.ndarray, indices: np.ndarray) -> None:
    """Each index points at its window's maximum in the pooled input's plane."""
    n, c = x.shape[:2]
    picked = np.take_along_axis(x.reshape(n, c, -1), indices.reshape(n, c, -1), 2).reshape(pooled.shape)
    np.testing.assert_array_equal(picked, pooled)


# (x shape, weight shape, stride, padding, dilation, groups, bias, pool (kernel, stride, padding, dilation, ceil))
_CHAINS = [
    (
        (3, 1, 12, 12),
        (4, 1, 3, 3),
        (1, 1),
        ((1, 1), (1, 1)),
        (1, 1),
        1,
        True,
        ((2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), False),
    ),  # W3's layer
    (
        (2, 3, 11, 9),
        (6, 3, 3, 3),
        (2, 1),
        ((1, 0), (2, 1)),
        (1, 1),
        1,
        False,
        ((3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), True),
    ),  # strided conv, 3x3 pool with padding
    (
        (2, 4, 10, 10),
        (6, 2, 3, 3),
        (1, 1),
        ((2, 2), (2, 2)),
        (2, 2),
        2,
        True,
        ((2, 2), (1, 1), ((0, 0), (0, 0)), (1, 1), False),
    ),  # groups, dilation, overlapping pool
    ((3, 2, 13), (4, 2, 3), (2,), ((1, 1),), (1,), 1, True, ((3,), (2,), ((1, 1),), (1,), False)),  # 1-d
    (
        (1, 2, 7, 7),
        (3, 2, 3, 3),
        (1, 1),
        ((0, 0), (0, 0)),
        (1, 1),
        1,
        True,
        ((2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), True),
    ),  # one sample, ceil mode
]


def _layer(case: Case, rng, dtype, config):
    x_shape, w_shape, stride, padding, dilation, groups, has_bias, pool = config
    x = case.input(rng.standard_normal(x_shape).astype(dtype))
    w = case.input(rng.standard_normal(w_shape).astype(dtype))
    bias = case.input(rng.standard_normal(w_shape[0]).astype(dtype)) if has_bias else None
    y = case.ops.conv(x, w, bias, stride, padding, dilation, groups)
    return y, pool


@pytest.mark.parametrize("config", _CHAINS, ids=lambda c: f"{c[0]}w{c[1]}s{c[2]}p{c[7][0]}")
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_conv_relu_pool_runs_as_one_step_bit_for_bit(chained, unchained, config, dtype, rng):
    case = Case()
    y, pool = _layer(case, rng, dtype, config)
    r = case.ops.relu(y)
    pooled, indices = case.ops.max_pool_with_indices(r, *pool)
    outs = [r, pooled, indices]  # the relu output is read again (as a backward's mask would)
    compiled, plain, replayed, plan = _run_both(case, outs, chained, unchained)
    for a, p, what in zip(compiled, plain, ["relu", "pooled", "indices"]):
        assert_same(a, p, what)
    _close(compiled[0], replayed[0])
    _close(compiled[1], replayed[1])
    _check_indices(compiled[0], compiled[1], compiled[2])
    (chain,) = _chains(plan)
    assert chain.pool is not None and chain.local == {chain.conv.outs[0]}  # the relu output is stored
    assert [type(s) for s in plan.schedule.steps] == [ConvChain]
    assert not [s for s in plan.schedule.steps if isinstance(s, Call)]


def test_nan_and_infinities_through_a_chain_as_without_it(chained, unchained, rng):
    """NaN and infinities spread through the conv; relu and the pool treat them as the
    unfused steps do (a NaN wins its window)."""
    case = Case()
    values = rng.standard_normal((2, 2, 9, 9)).astype(np.float32)
    values[0, 0, 2, 3], values[1, 1, 5, 5], values[1, 0, 7, 1] = np.nan, np.inf, -np.inf
    x = case.input(values)
    w = case.input(rng.standard_normal((3, 2, 3, 3)).astype(np.float32))
    bias = case.input(rng.standard_normal(3).astype(np.float32))
    y = case.ops.conv(x, w, bias, (1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    r = case.ops.relu(y)
    pooled, indices = case.ops.max_pool_with_indices(r, (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), False)
    compiled, plain, _, plan = _run_both(case, [r, pooled, indices], chained, unchained)
    assert np.isnan(compiled[1]).any()
    for a, p, what in zip(compiled, plain, ["relu", "pooled", "indices"]):
        assert_same(a, p, what)
    assert _chains(plan)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_values_only_the_chain_reads_live_per_sample(chained, unchained, dtype, rng):
    case = Case()
    y, pool = _layer(case, rng, dtype, _CHAINS[0])
    pooled, indices = case.ops.max_pool_with_indices(case.ops.relu(y), *pool)
    compiled, plain, _, plan = _run_both(case, [pooled, indices], chained, unchained)
    for a, p, what in zip(compiled, plain, ["pooled", "indices"]):
        assert_same(a, p, what)
    (chain,) = _chains(plan)
    relu_buf = chain.epilogue.stores[0].buffer
    assert chain.local == {chain.conv.outs[0], relu_buf}
    # Neither the conv output nor the relu output takes arena space: only a sample's block in scratch.
    assert chain.conv.outs[0] not in plan.memory.offsets and relu_buf not in plan.memory.offsets


@pytest.mark.parametrize("returned", [False, True], ids=["read", "returned"])
def test_a_conv_output_read_elsewhere_is_stored(chained, unchained, returned, rng):
    case = Case()
    y, pool = _layer(case, rng, np.dtype(np.float32), _CHAINS[0])
    pooled, _ = case.ops.max_pool_with_indices(case.ops.relu(y), *pool)
    outs = [pooled, y] if returned else [pooled]
    # A later step reads the conv output (here a sum over each sample).
    outs.append(case.ops.reduce(ReduceOp.SUM, case.ops.reshape(y, (y.shape[0], int(np.prod(y.shape[1:])))), 1))
    compiled, plain, replayed, plan = _run_both(case, outs, chained, unchained)
    for a, p, e in zip(compiled, plain, replayed):
        assert_same(a, p, "stored conv output")
        _close(a, e)
    (chain,) = _chains(plan)
    assert chain.conv.outs[0] not in chain.local and chain.conv.outs[0] in chain.writes()


def test_an_epilogue_with_other_operands_and_run_time_scalars(chained, unchained, rng):
    """relu(conv + residual) * per-channel scale * 0.5 (a run-time scalar), then a pool."""
    case = Case()
    y, pool = _layer(case, rng, np.dtype(np.float32), _CHAINS[0])
    residual = case.input(rng.standard_normal(y.shape).astype(np.float32))
    scale = case.input(rng.standard_normal((y.shape[1], 1, 1)).astype(np.float32))
    h = case.ops.relu(case.ops.binary(BinaryOp.ADD, y, residual))
    h = case.ops.binary(BinaryOp.MUL, case.ops.binary(BinaryOp.MUL, h, scale), 0.5)
    pooled, indices = case.ops.max_pool_with_indices(h, *pool)
    compiled, plain, replayed, plan = _run_both(case, [pooled, indices], chained, unchained)
    for a, p, what in zip(compiled, plain, ["pooled", "indices"]):
        assert_same(a, p, what)
    _close(compiled[0], replayed[0])
    (chain,) = _chains(plan)
    assert plan.schedule.scalars  # the 0.5 is a run-time scalar the chain's epilogue reads
    shifts = chain.shifts
    assert shifts[_input_buffer(plan, case, residual)] == int(np.prod(y.shape[1:]))
    assert shifts[_input_buffer(plan, case, scale)] == 0


def _input_buffer(plan, case: Case, value) -> int:
    """The buffer holding graph input ``value``."""
    (buf,) = [b.id for b in plan.schedule.buffers if b.kind == "input" and b.value == value.ref]
    return buf


def test_a_chain_without_a_pool(chained, unchained, rng):
    case = Case()
    y, _ = _layer(case, rng, np.dtype(np.float64), _CHAINS[1])
    r = case.ops.unary(UnaryOp.TANH, y)
    compiled, plain, replayed, plan = _run_both(case, [r], chained, unchained)
    assert_same(compiled[0], plain[0], "tanh")
    _close(compiled[0], replayed[0])
    (chain,) = _chains(plan)
    assert chain.pool is None


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_a_chain_ending_in_max_pool_without_indices(chained, unchained, dtype, rng):
    """An inference's ``max_pool`` (values only) joins the chain as ``max_pool_with_indices`` does."""
    case = Case()
    y, pool = _layer(case, rng, dtype, _CHAINS[1])
    pooled = case.ops.max_pool(case.ops.relu(y), *pool)
    compiled, plain, replayed, plan = _run_both(case, [pooled], chained, unchained)
    assert_same(compiled[0], plain[0], "pooled")
    _close(compiled[0], replayed[0])
    assert [type(s) for s in plan.schedule.steps] == [ConvChain]
    (chain,) = _chains(plan)
    assert chain.pool is not None and chain.pool.node.op == "max_pool"


@pytest.mark.parametrize("stored", [False, True], ids=["local", "stored"])
def test_a_pointwise_conv_chain_reads_its_input_as_the_columns(chained, unchained, stored, rng):
    """A 1x1 stride-1 conv (a ResNet bottleneck's) with a residual epilogue; stored: its
    output is returned too, so the chain needs no scratch at all."""
    case = Case()
    x = case.input(rng.standard_normal((3, 8, 6, 5)).astype(np.float32))
    w = case.input(rng.standard_normal((4, 8, 1, 1)).astype(np.float32))
    bias = case.input(rng.standard_normal(4).astype(np.float32))
    residual = case.input(rng.standard_normal((3, 4, 6, 5)).astype(np.float32))
    y = case.ops.conv(x, w, None if stored else bias, (1, 1), ((0, 0), (0, 0)), (1, 1), 1)
    h = case.ops.relu(case.ops.binary(BinaryOp.ADD, y, residual))
    outs = [h, y] if stored else [h]
    compiled, plain, replayed, plan = _run_both(case, outs, chained, unchained)
    for a, p, e in zip(compiled, plain, replayed):
        assert_same(a, p, "pointwise")
        _close(a, e)
    (chain,) = _chains(plan)
    assert (chain.conv.outs[0] in chain.local) is not stored


def test_a_batch_norms_per_channel_kernels_move_before_the_conv(chained, unchained, rng):
    """An unfolded inference batch norm: its per-channel scale and shift (kernels over
    the channels, scheduled after the conv) move before it, so conv -> norm -> relu ->
    pool is one chain."""
    case = Case()
    y, pool = _layer(case, rng, np.dtype(np.float32), _CHAINS[0])
    channels = y.shape[1]
    gamma, beta, mean = (case.input(rng.standard_normal(channels).astype(np.float32)) for _ in range(3))
    var = case.input(rng.uniform(0.5, 2.0, channels).astype(np.float32))
    ops = case.ops
    scale = ops.binary(BinaryOp.DIV, gamma, ops.unary(UnaryOp.SQRT, ops.binary(BinaryOp.ADD, var, 1e-5)))
    shift = ops.binary(BinaryOp.SUB, beta, ops.binary(BinaryOp.MUL, mean, scale))
    per_channel = (channels, 1, 1)
    h = ops.binary(
        BinaryOp.ADD, ops.binary(BinaryOp.MUL, y, ops.reshape(scale, per_channel)), ops.reshape(shift, per_channel)
    )
    pooled = ops.max_pool(ops.relu(h), *pool)
    compiled, plain, replayed, plan = _run_both(case, [pooled], chained, unchained)
    assert_same(compiled[0], plain[0], "pooled")
    _close(compiled[0], replayed[0])
    steps = plan.schedule.steps
    assert isinstance(steps[-1], ConvChain) and steps[-1].pool is not None
    assert all(isinstance(s, Kernel) and len(s.space) == 1 for s in steps[:-1])


def test_hoisting_without_a_chain_leaves_the_order(chained, unchained, rng):
    """A kernel independent of the conv stays where it was when no chain forms (the
    conv's output is read transposed)."""
    case = Case()
    y, _ = _layer(case, rng, np.dtype(np.float32), _CHAINS[0])
    other = case.ops.unary(UnaryOp.SQRT, case.input(rng.uniform(1.0, 2.0, 5).astype(np.float32)))
    h = case.ops.relu(case.ops.permute(y, (0, 1, 3, 2)))
    compiled, plain, replayed, plan = _run_both(case, [h, other], chained, unchained)
    for a, p, e in zip(compiled, plain, replayed):
        assert_same(a, p, "unchained")
        _close(a, e)
    graph, _ = case.abstract([h, other])
    plain_plan = unchained.plan(graph)
    plain_plan.run(FlexBackend(), list(case.values), case.abstract([h, other])[1])

    def order(p) -> list[str]:
        return [type(s).__name__ + str(getattr(s, "space", "")) for s in p.schedule.steps]

    assert not _chains(plan) and order(plan) == order(plain_plan)


def _fallback_graphs(case: Case, rng):
    """Graphs that do not match the pattern: (name, outputs)."""
    f32 = np.dtype(np.float32)
    y, pool = _layer(case, rng, f32, _CHAINS[0])
    return [
        # The kernel after the conv reduces (relu then a sum over channels).
        ("reduction", [case.ops.reduce(ReduceOp.SUM, case.ops.relu(y), 1)]),
        # A pool straight after the conv: no elementwise step between.
        ("pool", list(case.ops.max_pool_with_indices(y, *pool))),
        # The conv output read transposed: not element for element.
        ("transposed", [case.ops.relu(case.ops.permute(y, (0, 1, 3, 2)))]),
        # The kernel after the conv runs over more elements (broadcast against a new leading dim).
        (
            "broadcast",
            [
                case.ops.binary(
                    BinaryOp.MUL, case.ops.relu(y), case.input(rng.standard_normal((2, 1, 1, 1, 1)).astype(f32))
                )
            ],
        ),
    ]


@pytest.mark.parametrize("which", range(4), ids=["reduction", "pool", "transposed", "broadcast"])
def test_steps_that_do_not_match_stay_apart(chained, unchained, which, rng):
    case = Case()
    name, outs = _fallback_graphs(case, rng)[which]
    compiled, plain, replayed, plan = _run_both(case, outs, chained, unchained)
    for a, p, e in zip(compiled, plain, replayed):
        assert_same(a, p, name)
        if a.dtype.kind == "f":
            _close(a, e)
    assert not _chains(plan), name
    assert "conv" in [s.node.op for s in plan.schedule.steps if isinstance(s, Library)]


def test_the_pass_leaves_a_schedule_without_chains_unchanged(unchained, rng):
    case = Case()
    y, _ = _layer(case, rng, np.dtype(np.float32), _CHAINS[0])
    graph, scalars = case.abstract([case.ops.reduce(ReduceOp.SUM, case.ops.relu(y), 1)])
    plan = unchained.plan(graph)
    plan.run(FlexBackend(), list(case.values), scalars)
    steps = list(plan.schedule.steps)
    producer = dict(plan.schedule.producer)
    fuse_conv_chains(plan.schedule)
    assert plan.schedule.steps == steps and plan.schedule.producer == producer
    assert any(isinstance(s, Kernel) and s.reductions for s in steps)


# ---------------------------------------------------------------------- training steps
class _Net(Module):
    conv1: Module
    conv2: Module
    pool: Module
    head: Linear

    def forward(self, x: Tensor) -> Tensor:
        x = self.pool(Relu()(self.conv1(x)))
        x = self.pool(Relu()(self.conv2(x)))
        return self.head(x.flatten(1))


# (input side, conv stride, conv padding, pool kernel, pool stride)
_NETS = [(12, 1, 1, 2, 2), (22, 2, 0, 2, 2), (14, 1, 1, 3, 2), (12, 1, 0, 2, 1)]


def _out(n: int, k: int, s: int, p: int) -> int:
    return (n + 2 * p - k) // s + 1


def _train(net_config, executor, steps: int = 4):
    side, stride, padding, pk, ps = net_config
    device = Device.flex().autodiff()
    device.seed(3)
    x = Tensor.random([6, 2, side, side], Distribution.normal(0.0, 1.0), device=device)
    y = Tensor.from_ints([i % 5 for i in range(6)], device=device)
    n = side
    for _ in range(2):
        n = _out(_out(n, 3, stride, padding), pk, ps, 0)
    model = _Net(
        conv1=Conv2dConfig((2, 4), (3, 3), stride=(stride, stride), padding=(padding, padding)).init(device),
        conv2=Conv2dConfig((4, 5), (3, 3), stride=(stride, stride), padding=(padding, padding)).init(device),
        pool=MaxPool2dConfig((pk, pk), strides=(ps, ps)).init(),
        head=LinearConfig(5 * n * n, 5).init(device),
    )
    optim = AdamConfig().init()
    ce = CrossEntropyLoss()

    def train_step(model, x, y):
        loss = ce.forward(model(x), y)
        return optim.step(3e-3, model, GradientsParams.from_grads(loss.backward(), model)), loss

    step = ember.compile(train_step, executor=executor) if executor is not None else train_step
    losses = []
    for _ in range(steps):
        model, loss = step(model, x, y)
        losses.append(loss.into_scalar())
    params = [p.val().to_data().to_numpy() for p in model.params()]
    plan = next(iter(step._entries.values())).plan if executor is not None else None
    return np.array(losses), params, plan


@pytest.mark.parametrize("net_config", _NETS, ids=lambda c: f"n{c[0]}s{c[1]}p{c[2]}pool{c[3]}s{c[4]}")
def test_compiled_training_steps_with_chains_match_without_and_eager(net_config):
    losses, params, plan = _train(net_config, LLVMExecutor())
    plain_losses, plain_params, plain_plan = _train(net_config, LLVMExecutor(conv_chains=False))
    eager_losses, eager_params, _ = _train(net_config, None)
    assert len(_chains(plan)) == 2 and not _chains(plain_plan)
    assert all(c.pool is not None for c in _chains(plan))
    np.testing.assert_array_equal(losses, plain_losses)  # bit for bit, forward and backward
    for a, p in zip(params, plain_params):
        np.testing.assert_array_equal(a, p)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5)
    for a, e in zip(params, eager_params):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "stride", "padding"),
    [
        ((3, 64, 8, 8), (128, 64, 3, 3), (1, 1), ((1, 1), (1, 1))),
        ((4, 32, 9, 9), (96, 32, 5, 5), (2, 2), ((2, 1), (2, 1))),
        ((3, 256, 7, 7), (512, 256, 1, 1), (1, 1), ((0, 0), (0, 0))),  # pointwise: its input copied
    ],
    ids=["3x3", "strided-5x5", "pointwise"],
)
@pytest.mark.parametrize("chain", [True, False], ids=["chain", "conv-with-bias"])
def test_a_conv_of_few_positions_runs_the_batch_as_one_gemm(
    chained, unchained, x_shape, w_shape, stride, padding, chain, rng
):
    """ResNet's last stages (a large weight, few output positions): every sample's
    columns side by side and one ?gemm for the batch (``_Conv.batched``), the bias or the
    chain's epilogue and pooling applied per sample after; against flex's convolution."""
    from ember.backend.fusion.llvm.conv import conv_geometry

    case = Case()
    x = case.input(rng.standard_normal(x_shape).astype(np.float32))
    w = case.input((rng.standard_normal(w_shape) * 0.1).astype(np.float32))
    bias = case.input(rng.standard_normal(w_shape[0]).astype(np.float32))
    y = case.ops.conv(x, w, bias, stride, padding, (1, 1), 1)
    outs = [case.ops.max_pool(case.ops.relu(y), (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), False)] if chain else [y]
    compiled, plain, replayed, plan = _run_both(case, outs, chained, unchained)
    assert_same(compiled[0], plain[0], "batched")
    _close(compiled[0], replayed[0])
    convs = [s.conv if isinstance(s, ConvChain) else s for s in plan.schedule.steps]
    geometry = conv_geometry(plan.schedule.graph, next(s for s in convs if isinstance(s, Library)).node)
    assert geometry.batched
    assert bool(_chains(plan)) is chain
