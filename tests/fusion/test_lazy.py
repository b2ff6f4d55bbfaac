"""The fusion device decorator: lazy streams, sync points, plan caching, errors."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Distribution, Tensor
from ember.backend.fusion import LazyTensor, ReplayExecutor
from ember.errors import DeviceError, GraphError, IndexOutOfBoundsError
from tests.shared_models import Mlp


def test_reprs_specs_and_stacking():
    flex = Device.flex()
    fused = flex.fusion()
    assert repr(fused) == "Device<Fusion { device: Flex(Cpu) }>"
    assert (
        repr(fused.autodiff()) == "Device<Autodiff { device: Fusion { device: Flex(Cpu) }, checkpointing: Disabled }>"
    )
    assert fused is Device.flex().fusion() and fused.autodiff().inner() is fused
    assert fused.base() is flex and fused.autodiff().base() is flex
    assert fused.is_fusion() and fused.autodiff().is_fusion() and not flex.is_fusion()
    assert fused.backend_name == "flex"
    for spec in ("flex+fusion", "flex+fusion+autodiff", "flex+fusion+autodiff:balanced"):
        assert Device.parse(spec).spec() == spec.replace("+autodiff:disabled", "+autodiff")
    with pytest.raises(DeviceError, match="below autodiff"):
        flex.autodiff().fusion()
    with pytest.raises(DeviceError, match="once"):
        fused.fusion()


def test_ops_are_recorded_until_a_sync_point():
    device = Device.flex().fusion()
    backend = device.backend
    before = dict(backend.stats)
    a = Tensor.from_floats([[1.0, -2.0], [3.0, 4.0]], device=device)
    b = a.mul_scalar(2.0).add_scalar(1.0).exp().sum_dim(1)
    assert isinstance(b._primitive, LazyTensor) and b._primitive.value is None
    assert backend.stats["flushes"] == before["flushes"]
    expected = np.exp(np.array([[1.0, -2.0], [3.0, 4.0]], np.float32) * 2 + 1).sum(1, keepdims=True)
    np.testing.assert_allclose(b.to_data().to_numpy(), expected, rtol=1e-6)
    assert backend.stats["flushes"] == before["flushes"] + 1
    assert b._primitive.value is not None


def test_dead_intermediates_are_not_materialised(monkeypatch):
    """The planned graph's outputs are the handles alive at the sync point: the dropped
    add and mul results are values inside the fused kernel, never outputs."""
    device = Device.flex().fusion()
    executor = device.backend.executor
    planned = []
    real_plan = executor.plan

    def spy(graph):
        planned.append((len(graph.nodes), list(graph.outputs)))
        return real_plan(graph)

    monkeypatch.setattr(executor, "plan", spy)
    device.backend._plans.clear()  # plan afresh, so that the spy sees this stream's graph
    a = Tensor.from_floats([1.0, 2.0, 3.0], device=device)
    kept = a.exp()
    out = kept.add_scalar(1.0).mul_scalar(3.0).sum()  # the add and mul results are dropped
    assert out.into_scalar() == pytest.approx(3.0 * (np.exp([1.0, 2.0, 3.0]) + 1.0).sum(), rel=1e-6)
    ((nodes, outputs),) = planned
    assert nodes >= 4 and len(outputs) == 2  # exp, add, mul, sum recorded; only kept and out come out
    assert kept._primitive.value is not None  # alive from Python: computed


def test_one_plan_per_structure_floats_included():
    device = Device.flex().fusion()
    backend = device.backend
    x = Tensor.from_floats(np.arange(12, dtype=np.float32).reshape(3, 4), device=device)

    def step(scale):
        return x.mul_scalar(scale).tanh().sum().into_scalar()

    step(0.5)
    built = backend.stats["plans_built"]
    for _ in range(3):
        step(0.5)
    assert backend.stats["plans_built"] == built  # same structure: cached


def test_random_draws_in_program_order():
    def draws(device):
        device.seed(7)
        a = Tensor.random([4], Distribution.uniform(0.0, 1.0), device=device).mul_scalar(2.0)
        device.seed(7)  # reseeding after recording must not change a's values
        b = Tensor.random([4], Distribution.uniform(0.0, 1.0), device=device)
        return a.to_data().to_numpy(), b.to_data().to_numpy()

    fused_a, fused_b = draws(Device.flex().fusion())
    eager_a, eager_b = draws(Device.flex())
    np.testing.assert_array_equal(fused_a, eager_a)
    np.testing.assert_array_equal(fused_b, eager_b)


def test_errors_surface_at_the_sync_point_and_poison_only_dependents():
    device = Device.flex().fusion()
    t = Tensor.zeros([2, 3], device=device)
    bad = t.select(1, [3])
    good = t.add_scalar(1.0)
    with pytest.raises(IndexOutOfBoundsError, match="out of bounds"):
        bad.to_data()
    assert t.to_data().to_numpy().sum() == 0  # computed before the failing op
    with pytest.raises(GraphError, match="never computed"):
        good.to_data()  # queued after it in the failed stream
    assert Tensor.ones([2], device=device).sum().into_scalar() == 2.0  # the device still works


def test_long_streams_run_in_pieces():
    device = Device.flex().fusion()
    backend = device.backend
    x = Tensor.from_floats([1.0], device=device)
    old = backend.MAX_STREAM
    backend.MAX_STREAM = 50
    try:
        for _ in range(120):
            x = x.add_scalar(1.0)
        assert x.into_scalar() == 121.0
    finally:
        backend.MAX_STREAM = old


def test_replayed_training_matches_eager_bit_for_bit():
    from ember.nn.loss import MseLoss, Reduction
    from ember.optim import AdamConfig, GradientsParams

    def losses(device):
        device.seed(42)
        x = Tensor.random([64, 4], Distribution.uniform(-1.0, 1.0), device=device)
        y = x.matmul(Tensor.from_floats([[1.0], [-2.0], [0.5], [3.0]], device=device)).add_scalar(0.5)
        model = Mlp.new(device)
        optim = AdamConfig().init()
        out, built = [], []
        for _ in range(20):
            loss = MseLoss().forward(model(x), y, Reduction.MEAN)
            out.append(loss.into_scalar())
            model = optim.step(1e-2, model, GradientsParams.from_grads(loss.backward(), model))
            built.append(getattr(device.inner().backend, "stats", {}).get("plans_built"))
        return out, built

    fused = Device.flex().fusion().autodiff()
    backend = fused.inner().backend
    compiled = backend.executor
    backend.executor = ReplayExecutor()  # replay runs the very calls eager runs: bit for bit
    try:
        fused_losses, built = losses(fused)
    finally:
        backend.executor = compiled
    assert fused_losses == losses(Device.flex().autodiff())[0]
    assert built[-1] == built[5]  # the loop repeats its structure: no new plans after warm-up
