"""The LLVM executor's hand-written lowerings (convolutions, max pooling, gather and
scatter-add) against flex: values, indices, errors, and gradients through them."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Distribution, Tensor
from ember.backend.flex import FlexBackend
from ember.backend.fusion.llvm import LLVMExecutor
from ember.backend.fusion.replay import PartialRun
from ember.backend.fusion.scheduler import Call, Library
from ember.errors import IndexOutOfBoundsError
from tests.fusion.oracle import FLOATS, Case, assert_same


@pytest.fixture(scope="module")
def executor():
    return LLVMExecutor()


def _libraries(plan) -> list[str]:
    return [s.node.op for s in plan.schedule.steps if isinstance(s, Library)]


def _calls(plan) -> list[str]:
    return [s.node.op for s in plan.schedule.steps if isinstance(s, Call)]


# ---------------------------------------------------------------------- gather / scatter
@pytest.mark.parametrize("dtype", [*FLOATS, np.dtype(np.int64)], ids=str)
@pytest.mark.parametrize(
    ("shape", "dim", "index_shape"),
    [
        ((6, 5), 1, (6, 1)),
        ((6, 5), 0, (3, 5)),
        ((4, 5, 3), 1, (2, 7, 3)),
        ((4, 5, 3), 2, (4, 5, 6)),
        ((7,), 0, (9,)),
    ],
)
def test_gather_and_scatter_add_match_flex_bit_for_bit(executor, dtype, shape, dim, index_shape, rng):
    case = Case()
    x = case.input((rng.standard_normal(shape) * 10).astype(dtype))
    idx = case.input(rng.integers(0, shape[dim], index_shape).astype(np.int64))  # repeats accumulate in order
    values = case.input((rng.standard_normal(index_shape) * 10).astype(dtype))
    gathered = case.ops.gather(x, dim, idx)
    scattered = case.ops.scatter_add(x, dim, idx, values)
    compiled, replayed, plan = case.run(executor, [gathered, scattered])
    for a, e, what in zip(compiled, replayed, ["gather", "scatter_add"]):
        assert_same(a, e, what)
    assert _libraries(plan) == ["gather", "scatter_add"] and not _calls(plan)


@pytest.mark.parametrize("bad", [-1, 5])
def test_an_index_out_of_range_raises_as_on_flex(executor, bad, rng):
    for op in ("gather", "scatter_add"):
        case = Case()
        x = case.input(rng.standard_normal((3, 5)).astype(np.float32))
        idx = case.input(np.array([[0], [bad], [2]], np.int64))
        out = (
            case.ops.gather(x, 1, idx)
            if op == "gather"
            else case.ops.scatter_add(x, 1, idx, case.input(np.ones((3, 1), np.float32)))
        )
        graph, scalars = case.abstract([out])
        plan = executor.plan(graph)
        with pytest.raises(PartialRun) as caught:  # what a fusion device raises again at its sync point
            plan.run(FlexBackend(), list(case.values), scalars)
        assert isinstance(caught.value.error, IndexOutOfBoundsError)
        assert f"index {bad} is out of bounds for dim 1 of size 5" in str(caught.value.error)
        # The plan still works for good indices afterwards.
        values = list(case.values)
        values[1] = np.array([[0], [4], [2]], np.int64)
        plan.run(FlexBackend(), values, scalars)


def test_index_errors_surface_at_the_sync_point_of_a_fusion_device():
    device = Device.flex().fusion()
    x = Tensor.from_floats([[1.0, 2.0], [3.0, 4.0]], device=device)
    before = x.mul_scalar(2.0)
    bad = x.exp().gather(1, Tensor.from_ints([[0], [2]], device=device))
    with pytest.raises(IndexOutOfBoundsError, match="out of bounds"):
        bad.to_data()
    assert before.to_data().tolist() == [[2.0, 4.0], [6.0, 8.0]]
    good = x.gather(1, Tensor.from_ints([[1], [0]], device=device))
    assert good.to_data().tolist() == [[2.0], [3.0]]


# ---------------------------------------------------------------------- max pooling
_POOLS = [
    # (input shape, kernel, stride, padding, dilation, ceil_mode)
    ((2, 3, 8, 8), (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), False),
    ((2, 3, 9, 7), (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), False),
    ((2, 3, 9, 7), (3, 2), (2, 3), ((1, 0), (0, 1)), (1, 1), True),
    ((1, 2, 10, 10), (3, 3), (1, 1), ((1, 1), (1, 1)), (2, 2), False),
    ((2, 2, 11), (3,), (2,), ((1, 1),), (1,), True),
    ((1, 2, 5, 6, 4), (2, 3, 2), (2, 2, 1), ((0, 0), (1, 1), (0, 1)), (1, 1, 1), False),
]


@pytest.mark.parametrize("config", _POOLS, ids=lambda c: f"{c[0]}k{c[1]}s{c[2]}")
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_max_pool_and_its_backward_match_flex_bit_for_bit(executor, config, dtype, rng):
    shape, kernel, stride, padding, dilation, ceil_mode = config
    values = rng.standard_normal(shape)
    values.flat[::7] = np.round(values.flat[::7])  # ties
    values.flat[3] = np.nan
    values.flat[10] = -np.inf
    values.reshape(shape[0] * shape[1], -1)[-1] = -np.inf  # a plane of -inf: padding ties
    case = Case()
    x = case.input(values.astype(dtype))
    pooled, indices = case.ops.max_pool_with_indices(x, kernel, stride, padding, dilation, ceil_mode)
    grad = case.input(rng.standard_normal(pooled.shape).astype(dtype))
    back = case.ops.max_pool_backward(grad, indices, shape)  # overlapping windows accumulate
    compiled, replayed, plan = case.run(executor, [pooled, indices, back])
    for a, e, what in zip(compiled, replayed, ["values", "indices", "backward"]):
        assert_same(a, e, what)
    assert not _calls(plan)


@pytest.mark.parametrize("config", _POOLS, ids=lambda c: f"{c[0]}k{c[1]}s{c[2]}")
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_max_pool_without_indices_matches_flex_bit_for_bit(executor, config, dtype, rng):
    """``max_pool`` (an inference's pooling, no indices): the same loop, the values only."""
    shape, kernel, stride, padding, dilation, ceil_mode = config
    values = rng.standard_normal(shape)
    values.flat[::7] = np.round(values.flat[::7])
    values.flat[3] = np.nan  # a NaN wins its windows, as np.maximum does
    values.flat[10] = -np.inf
    values.reshape(shape[0] * shape[1], -1)[-1] = -np.inf
    case = Case()
    x = case.input(values.astype(dtype))
    pooled = case.ops.max_pool(x, kernel, stride, padding, dilation, ceil_mode)
    compiled, replayed, plan = case.run(executor, [pooled])
    assert_same(compiled[0], replayed[0], "values")
    assert _libraries(plan) == ["max_pool"] and not _calls(plan)


# ---------------------------------------------------------------------- convolution
_CONVS = [
    # (x shape, weight shape, stride, padding, dilation, groups, bias)
    ((4, 1, 12, 12), (6, 1, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1, True),
    ((3, 4, 9, 8), (6, 4, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1, False),
    ((2, 4, 11, 9), (6, 2, 3, 2), (2, 1), ((1, 0), (2, 1)), (1, 2), 2, True),
    ((2, 3, 10, 10), (5, 3, 5, 5), (3, 2), ((2, 2), (0, 0)), (1, 1), 1, True),
    ((2, 3, 7, 7), (4, 3, 3, 3), (1, 1), ((0, 0), (0, 0)), (2, 2), 1, True),
    ((3, 2, 13), (4, 2, 3), (2,), ((1, 1),), (1,), 1, True),
    ((1, 2, 5, 6, 4), (3, 2, 2, 3, 2), (1, 1, 1), ((1, 1), (1, 0), (0, 0)), (1, 1, 1), 1, True),
    ((3, 6, 5, 4), (8, 6, 1, 1), (1, 1), ((0, 0), (0, 0)), (1, 1), 1, True),  # pointwise: no columns
    ((2, 6, 5, 4), (4, 3, 1, 1), (1, 1), ((0, 0), (0, 0)), (1, 1), 2, False),  # pointwise, grouped
    ((2, 6, 7, 5), (4, 6, 1, 1), (2, 2), ((0, 0), (0, 0)), (1, 1), 1, True),  # 1x1, stride 2: columns
]


@pytest.mark.parametrize("config", _CONVS, ids=lambda c: f"{c[0]}w{c[1]}s{c[2]}g{c[5]}")
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_conv_and_its_gradients_match_flex(executor, config, dtype, rng):
    x_shape, w_shape, stride, padding, dilation, groups, has_bias = config
    case = Case()
    x = case.input(rng.standard_normal(x_shape).astype(dtype))
    w = case.input(rng.standard_normal(w_shape).astype(dtype))
    bias = case.input(rng.standard_normal(w_shape[0]).astype(dtype)) if has_bias else None
    y = case.ops.conv(x, w, bias, stride, padding, dilation, groups)
    g = case.input(rng.standard_normal(y.shape).astype(dtype))
    gw = case.ops.conv_weight_grad(x, g, w_shape, stride, padding, dilation, groups)
    outs = [y, gw]
    transposable = all(s == 1 for s in stride)
    if transposable:  # the input gradient: conv_transpose with stride 1 (output_padding 0)
        out_pad = tuple(0 for _ in stride)
        outs.append(case.ops.conv_transpose(g, w, None, stride, padding, out_pad, dilation, groups))
    compiled, replayed, plan = case.run(executor, outs)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    for a, e in zip(compiled, replayed):
        assert a.shape == e.shape and a.dtype == e.dtype
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol * np.abs(e).max())
    assert not _calls(plan)


def test_conv_transpose_with_a_bias_and_output_padding(executor, rng):
    case = Case()
    x = case.input(rng.standard_normal((2, 4, 6, 5)).astype(np.float32))
    w = case.input(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    b = case.input(rng.standard_normal(3).astype(np.float32))
    unit = case.ops.conv_transpose(x, w, b, (1, 1), ((1, 0), (0, 1)), (0, 0), (1, 2), 1)
    strided = case.ops.conv_transpose(x, w, b, (2, 2), ((1, 1), (1, 1)), (1, 0), (1, 1), 1)  # stays on flex
    compiled, replayed, plan = case.run(executor, [unit, strided])
    for a, e in zip(compiled, replayed):
        np.testing.assert_allclose(a, e, rtol=2e-5, atol=2e-5 * np.abs(e).max())
    assert _libraries(plan) == ["conv_transpose"] and _calls(plan) == ["conv_transpose"]


class _Cnn:
    """conv -> relu -> max pool -> conv -> relu -> max pool -> linear, as tensor ops."""

    def __init__(self, device: Device):
        device.seed(5)
        self.w1 = Tensor.random([4, 2, 3, 3], Distribution.normal(0.0, 0.4), device=device).require_grad()
        self.b1 = Tensor.random([4], Distribution.normal(0.0, 0.1), device=device).require_grad()
        self.w2 = Tensor.random([6, 4, 3, 3], Distribution.normal(0.0, 0.3), device=device).require_grad()
        self.fc = Tensor.random([6 * 2 * 2, 3], Distribution.normal(0.0, 0.3), device=device).require_grad()
        self.x = Tensor.random([3, 2, 8, 8], Distribution.normal(0.0, 1.0), device=device)

    def loss(self):
        from ember.nn import functional as F

        h = F.max_pool2d(F.conv2d(self.x, self.w1, self.b1, padding=(1, 1)).clamp_min(0.0), (2, 2))
        h = F.max_pool2d(F.conv2d(h, self.w2, None, padding=(1, 1)).clamp_min(0.0), (2, 2))
        return h.flatten(1).matmul(self.fc).square().mean()


def test_values_and_gradients_through_the_lowerings_match_eager():
    def run(device: Device):
        net = _Cnn(device)
        loss = net.loss()
        grads = loss.backward()
        return [loss.into_scalar()] + [t.grad(grads).to_data().to_numpy() for t in (net.w1, net.b1, net.w2, net.fc)]

    fused = run(Device.flex().fusion().autodiff())
    eager = run(Device.flex().autodiff())
    for a, e in zip(fused, eager):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------- embedding backward
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize(("index_shape", "n"), [((4, 5), 7), ((9,), 3), ((2, 0), 4), ((3, 2), 1)])
def test_embedding_backward_matches_flex_bit_for_bit(executor, dtype, index_shape, n, rng):
    case = Case()
    grad = case.input(rng.standard_normal((*index_shape, 6)).astype(dtype))
    idx = case.input(rng.integers(0, n, index_shape).astype(np.int64))  # repeats accumulate in order
    out = case.ops.embedding_backward(grad, idx, n)
    compiled, replayed, plan = case.run(executor, [out])
    assert_same(compiled[0], replayed[0], "embedding_backward")
    assert _libraries(plan) == ["embedding_backward"] and not _calls(plan)


@pytest.mark.parametrize("bad", [-1, 5])
def test_embedding_backward_with_an_index_out_of_range_raises(executor, bad):
    case = Case()
    grad = case.input(np.ones((3, 2), np.float32))
    idx = case.input(np.array([0, bad, 2], np.int64))
    graph, scalars = case.abstract([case.ops.embedding_backward(grad, idx, 5)])
    plan = executor.plan(graph)
    with pytest.raises(PartialRun) as caught:
        plan.run(FlexBackend(), list(case.values), scalars)
    assert isinstance(caught.value.error, IndexOutOfBoundsError)
    assert f"index {bad} is out of bounds for 5 embeddings" in str(caught.value.error)
