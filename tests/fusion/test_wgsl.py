"""The WGSL executor of the fusion IR on ``Device.wgpu().fusion()``: elementwise
chains, reductions with their epilogues and matmuls with their bias and activation
as single kernels, against float64 numpy and eager cube; tapes of repeated plans."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.backend.fusion.executors import EXECUTOR_ENV, ReplayExecutor, default_executor
from ember.backend.fusion.wgsl import CubeExecutor
from tests.conftest import _gpu_device


@pytest.fixture
def rng():
    return np.random.default_rng(11)


@pytest.fixture
def fused():
    """``Device.wgpu().fusion()`` with a fresh WGSL executor (its own plans and stats)."""
    device = _gpu_device().fusion()
    backend = device.backend
    backend.sync()
    old = backend.executor
    backend.executor = CubeExecutor()
    yield device
    backend.sync()
    backend.executor = old


def launches(device: Device, fn) -> tuple[object, int]:
    """``fn()``'s result (materialized) and the cube launches its stream made."""
    cube = device.backend.inner
    device.backend.sync()
    cube.reset_stats()
    result = fn()
    device.backend.sync()
    return result, cube.stats()["launches"]


def data(device: Device, array: np.ndarray) -> Tensor:
    t = Tensor.from_data(array, device=device)
    device.backend.sync()
    return t


def numpy(t: Tensor) -> np.ndarray:
    return t.to_data().to_numpy()


def test_the_default_executor_over_cube(monkeypatch):
    assert isinstance(_gpu_device().fusion().backend.executor, CubeExecutor)
    monkeypatch.setenv(EXECUTOR_ENV, "replay")
    assert isinstance(default_executor(_gpu_device().backend), ReplayExecutor)


def test_an_elementwise_chain_is_one_kernel(fused, rng):
    a, b = rng.standard_normal((2, 37, 19)).astype(np.float32)
    x, y = data(fused, a), data(fused, b)
    out, n = launches(fused, lambda: ((x * 2.0 + y).exp() - x.abs().sqrt()).clamp(-3.0, 5.0).mul_scalar(0.5))
    want = np.clip(np.exp(a * 2.0 + b) - np.sqrt(np.abs(a)), -3.0, 5.0) * 0.5
    np.testing.assert_allclose(numpy(out), want, rtol=2e-6, atol=1e-6)
    assert n == 1


def test_several_results_from_one_kernel(fused, rng):
    a = rng.standard_normal((64, 8)).astype(np.float32)
    x = data(fused, a)
    (p, q), n = launches(fused, lambda: (x.mul_scalar(3.0), x.add_scalar(1.0).tanh()))
    np.testing.assert_allclose(numpy(p), a * 3.0, rtol=1e-6)
    np.testing.assert_allclose(numpy(q), np.tanh(a + 1.0), rtol=1e-5, atol=1e-6)
    assert n == 1


@pytest.mark.parametrize("shape, dim", [((6, 40), 1), ((3, 300), 1), ((300, 5), 0), ((2, 3, 70), 1)])
def test_a_reduction_with_its_prologue_and_epilogue_is_one_kernel(fused, rng, shape, dim):
    """Rows short (a thread per output) and long (a workgroup per output), contiguous
    and strided."""
    a = rng.standard_normal(shape).astype(np.float32)
    x = data(fused, a)
    out, n = launches(fused, lambda: x.mul(x).mean_dim(dim).add_scalar(1.0).sqrt())
    np.testing.assert_allclose(numpy(out), np.sqrt((a.astype(np.float64) ** 2).mean(dim, keepdims=True) + 1), rtol=1e-5)
    assert n == 1


def test_values_of_both_spaces_from_one_reduction_kernel(fused, rng):
    a = rng.standard_normal((9, 33)).astype(np.float32)
    x = data(fused, a)
    (e, total, top), n = launches(
        fused, lambda: (lambda e: (e, e.sum_dim(1).log(), e.amax(1, keepdim=True)))(x.sub_scalar(0.5).exp())
    )
    np.testing.assert_allclose(numpy(e), np.exp(a - 0.5), rtol=1e-5)
    np.testing.assert_allclose(numpy(total), np.log(np.exp(a - 0.5).sum(1, keepdims=True)), rtol=1e-5)
    np.testing.assert_allclose(numpy(top), np.exp(a - 0.5).max(1, keepdims=True), rtol=1e-6)
    assert n == 1


@pytest.mark.parametrize("shape, dim", [((5, 7), 1), ((3, 200), 1), ((200, 3), 0)])
def test_reductions_of_every_dtype_match_eager_cube(fused, rng, shape, dim):
    eager = _gpu_device()
    i64 = rng.integers(-(2**40), 2**40, shape)
    i32 = rng.integers(-100, 100, shape).astype(np.int32)
    f32 = rng.standard_normal(shape).astype(np.float32)

    def run(d: Device) -> list[np.ndarray]:
        a, b, c = (Tensor.from_data(v, device=d) for v in (i64, i32, f32))
        outs = [
            a.mul_scalar(2).amax(dim, keepdim=True),
            a.sum_dim(dim),
            b.greater_elem(0).any_dim(dim),
            b.greater_elem(-99).all_dim(dim),
            b.mul_scalar(3).sum_dim(dim),
            c.mul_scalar(0.5).prod_dim(dim),
            c.amin(dim, keepdim=True),
        ]
        return [numpy(o) for o in outs]

    for got, want in zip(run(fused), run(eager)):
        assert got.dtype == want.dtype
        if got.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-5)
        else:
            np.testing.assert_array_equal(got, want)


def test_matmul_with_bias_and_relu_is_one_launch(fused, rng):
    a = rng.standard_normal((32, 24)).astype(np.float32)
    w = rng.standard_normal((24, 16)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    x, wt, bt = data(fused, a), data(fused, w), data(fused, b)
    out, n = launches(fused, lambda: x.matmul(wt).add(bt.unsqueeze(0)).clamp_min(0.0))
    np.testing.assert_allclose(numpy(out), np.maximum(a.astype(np.float64) @ w + b, 0), rtol=1e-5, atol=1e-5)
    assert n == 1


def test_matmul_with_several_results_in_its_epilogue(fused, rng):
    """Two independent uses of a product share one kernel, which becomes the matmul's
    epilogue with two outputs."""
    a = rng.standard_normal((16, 8)).astype(np.float32)
    w = rng.standard_normal((8, 12)).astype(np.float32)
    x, wt = data(fused, a), data(fused, w)
    (p, q), n = launches(fused, lambda: (lambda h: (h.mul_scalar(2.0), h.tanh()))(x.matmul(wt)))
    h = a.astype(np.float64) @ w
    np.testing.assert_allclose(numpy(p), 2 * h, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(numpy(q), np.tanh(h), rtol=1e-5, atol=1e-5)
    assert n == 1


def test_integer_and_bool_chains_match_eager_cube(fused, rng):
    """Three rounds with new data: the first two run the launches (the second records
    them), the third replays the tape."""
    eager = _gpu_device()
    for _ in range(3):
        u8 = rng.integers(0, 256, (5, 7)).astype(np.uint8)
        i64 = rng.integers(-(2**40), 2**40, (5, 7))
        i32 = rng.integers(-1000, 1000, (5, 7)).astype(np.int32)

        def chain(d: Device, u8=u8, i64=i64, i32=i32) -> list[np.ndarray]:
            u, w, i = (Tensor.from_data(v, device=d) for v in (u8, i64, i32))
            wrapped = u.add_scalar(200).mul_scalar(3).sub(u)  # uint8 wraps at every op
            big = w.mul_scalar(3).add(w).remainder_scalar(1_000_003)
            logic = i.greater_elem(0).bool_and(u.lower_elem(100)).int()
            return [numpy(t) for t in (wrapped, big, logic, i.div_scalar(7), wrapped.cast("int32").sum_dim(1))]

        for got, want in zip(chain(fused), chain(eager)):
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
    assert fused.backend.executor.stats["replays"] >= 1


def test_fixed_scalars_are_constants_of_the_plan():
    """The compile layer may fix the trace's literals (``fixed_scalars``): a run passes
    the other scalars only."""
    from ember.backend.fusion.graph import Aval, Graph, Sc
    from ember.backend.fusion.primitive_graph import GraphBuilder, Value
    from ember.backend.ops import BinaryOp

    cube = _gpu_device().backend
    graph = Graph()
    ops = GraphBuilder(graph)
    x = graph.add_input(Aval((4, 4), np.dtype(np.float32)))
    scaled = ops.binary(BinaryOp.MUL, Value(x, graph.avals[x]), Sc(0))
    graph.outputs = [ops.binary(BinaryOp.ADD, scaled, Sc(1)).ref]
    plan = CubeExecutor().plan(graph, fixed_scalars={1: 3.0})
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    for s in (2.0, -1.0, 0.5):
        (out,) = plan.run(cube, [cube.from_numpy(a)], [s])
        np.testing.assert_allclose(cube.to_numpy(out), a * s + 3.0)


def test_kernels_wider_than_the_bindings_are_split(fused, rng, monkeypatch):
    monkeypatch.setattr(fused.backend.inner.runtime, "max_storage_buffers", 6)
    arrays = rng.standard_normal((14, 4, 8)).astype(np.float32)
    xs = [data(fused, a) for a in arrays]

    def total():
        out = xs[0]
        for x in xs[1:]:
            out = out.mul_scalar(0.5).add(x.exp())
        return out

    out, n = launches(fused, total)
    want = arrays[0].astype(np.float64)
    for a in arrays[1:]:
        want = want * 0.5 + np.exp(a)
    np.testing.assert_allclose(numpy(out), want, rtol=1e-5)
    assert n > 1


def test_float_scalars_are_run_time_values(fused, rng):
    a = rng.standard_normal((8, 8)).astype(np.float32)
    x = data(fused, a)
    plans = fused.backend.stats["plans_built"]
    for s in (0.5, 2.0, -3.0):
        np.testing.assert_allclose(numpy(x.mul_scalar(s).add_scalar(s)), a * s + s, rtol=1e-6)
    assert fused.backend.stats["plans_built"] == plans + 1


def test_a_repeated_plan_replays_its_tape(fused, rng):
    arrays = rng.standard_normal((6, 16, 12)).astype(np.float32)
    w = rng.standard_normal((12, 4)).astype(np.float32)
    wt = data(fused, w)
    kept = []
    for a in arrays:  # new inputs each time, every result kept
        x = data(fused, a)
        kept.append(x.matmul(wt).tanh().sum_dim(0))
        fused.backend.sync()
    stats = fused.backend.executor.stats
    assert stats["tapes"] == 1 and stats["replays"] == len(arrays) - 2
    for a, got in zip(arrays, kept):  # no replay wrote over a result still held
        np.testing.assert_allclose(numpy(got), np.tanh(a.astype(np.float64) @ w).sum(0, keepdims=True), rtol=1e-5)


def test_a_tape_runs_inputs_of_another_layout_one_by_one(fused, rng):
    a = rng.standard_normal((10, 6)).astype(np.float32)
    big = data(fused, rng.standard_normal((10, 9)).astype(np.float32))
    x = data(fused, a)
    for _ in range(3):
        numpy(x.exp().mul_scalar(2.0))
    strided = big.slice([(0, 10), (2, 8)])
    fused.backend.sync()  # a strided view of big's buffer, the input of the same plan
    got = numpy(strided.exp().mul_scalar(2.0))
    np.testing.assert_allclose(got, np.exp(numpy(big)[:, 2:8]) * 2.0, rtol=1e-6)
    assert fused.backend.executor.stats["tape_fallbacks"] >= 1
