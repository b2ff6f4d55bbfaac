"""The graph: tracking, ordering, accumulation, release, checkpointing."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest

from ember import Device, Distribution, Tensor
from ember.backend.autodiff import Checkpointing, Gradients
from ember.backend.autodiff.graph import retained_bytes
from ember.errors import DTypeError, GraphError
from ember.tensor import activation as act


@pytest.fixture
def ad():
    return Device.flex().autodiff()


def test_tracking_api(ad):
    x = Tensor.ones([2], device=ad)
    assert not x.is_require_grad()
    y = x.require_grad()
    assert y.is_require_grad() and not x.is_require_grad()
    assert y.mul_scalar(2).is_require_grad()
    assert not y.detach().is_require_grad()
    assert not y.set_require_grad(False).is_require_grad()
    assert "require_grad=True" in repr(y)
    with pytest.raises(DTypeError, match="float"):
        Tensor.ones([2], device=ad, dtype="int64").require_grad()


def test_untracked_ops_cost_no_graph(ad):
    x = Tensor.ones([3], device=ad)
    out = x.add(x).exp()
    assert out.primitive.node is None


def test_non_differentiable_results_are_untracked(ad):
    x = Tensor.from_floats([1.0, 3.0, 2.0], device=ad).require_grad()
    for result in (x.argmax(0), x.greater_elem(1.0), x.argsort(0), x.equal(x), x.cast("int64"), x.argwhere()):
        assert not result.is_require_grad()
    assert x.floor_div(2.0).is_require_grad() is False


def test_plain_device_is_a_no_op(flex):
    x = Tensor.ones([2], device=flex)
    assert x.require_grad() is not None and not x.require_grad().is_require_grad()
    assert x.detach().tolist() == [1.0, 1.0]
    with pytest.raises(GraphError, match=r"autodiff\(\)"):
        x.backward()
    with pytest.raises(GraphError):
        x.grad(Gradients())


def test_backward_without_tracked_inputs_raises(ad):
    with pytest.raises(GraphError, match="require_grad"):
        Tensor.ones([1], device=ad).sum().backward()


def test_gradients_accumulate_and_are_on_inner_device(ad):
    x = Tensor.from_floats([1.0, 2.0], device=ad).require_grad()
    y = x.mul(x).add(x).add(x).sum()
    grads = y.backward()
    g = x.grad(grads)
    assert g.device == Device.flex()
    assert g.tolist() == [4.0, 6.0]
    assert len(grads) == 1


def test_grad_remove_and_replace(ad):
    x = Tensor.from_floats([1.0], device=ad).require_grad()
    grads = x.mul_scalar(3).sum().backward()
    x.grad_replace(grads, Tensor.from_floats([7.0], device=Device.flex()))
    assert x.grad(grads).tolist() == [7.0]
    assert x.grad_remove(grads).tolist() == [7.0]
    assert x.grad(grads) is None
    assert Tensor.ones([1], device=ad).grad(grads) is None


def test_intermediate_tensors_have_no_gradient_kept(ad):
    x = Tensor.from_floats([1.0], device=ad).require_grad()
    h = x.exp()
    grads = h.mul_scalar(2).sum().backward()
    assert h.grad(grads) is None
    assert x.grad(grads) is not None


def test_backward_seeds_ones_for_any_shape(ad):
    x = Tensor.from_floats([[1.0, 2.0]], device=ad).require_grad()
    grads = x.mul_scalar(3).backward()
    assert x.grad(grads).tolist() == [[3.0, 3.0]]


def test_consumed_graph_raises(ad):
    x = Tensor.from_floats([1.0, 2.0], device=ad).require_grad()
    h = x.exp()
    loss = h.sum()
    loss.backward()
    with pytest.raises(GraphError, match="already used"):
        loss.backward()
    with pytest.raises(GraphError, match="already used"):
        h.mul_scalar(2).sum().backward()
    # the leaf stays usable for a new forward pass
    grads = x.exp().sum().backward()
    assert x.grad(grads) is not None


def test_chain_of_100k_ops_has_no_recursion_limit(ad):
    x = Tensor.from_floats([1.0], device=ad).require_grad()
    y = x
    for _ in range(100_000):
        y = y.add_scalar(1e-6)
    grads = y.sum().backward()
    assert x.grad(grads).tolist() == [1.0]


def test_graph_is_released_after_backward(ad):
    x = Tensor.random([64, 16], device=ad).require_grad()
    loss = x.exp().mul(x).sum()
    assert retained_bytes(loss.primitive.node) > 0
    loss.backward()
    assert retained_bytes(loss.primitive.node) == 0


def _mlp_step(params, x, y):
    w1, b1, w2, b2 = params
    h = act.relu(x.matmul(w1).add(b1))
    pred = h.matmul(w2).add(b2)
    loss = pred.sub(y).powi_scalar(2).mean()
    loss.into_scalar()
    grads = loss.backward()
    return [p.sub(p.grad(grads).to_device(p.device).mul_scalar(1e-2)).detach().require_grad() for p in params]


@pytest.mark.slow
def test_memory_stays_flat_over_10k_training_steps(ad):
    ad.seed(0)
    x = Tensor.random([64, 4], Distribution.uniform(-1, 1), device=ad)
    y = x.sum_dim(1)
    params = [
        Tensor.random([4, 16], Distribution.normal(0, 0.5), device=ad).require_grad(),
        Tensor.zeros([16], device=ad).require_grad(),
        Tensor.random([16, 1], Distribution.normal(0, 0.5), device=ad).require_grad(),
        Tensor.zeros([1], device=ad).require_grad(),
    ]
    for _ in range(200):
        params = _mlp_step(params, x, y)
    gc.collect()
    tracemalloc.start()
    for _ in range(2000):
        params = _mlp_step(params, x, y)
    gc.collect()
    early, _ = tracemalloc.get_traced_memory()
    for _ in range(8000):
        params = _mlp_step(params, x, y)
    gc.collect()
    late, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert late - early < 64 * 1024, f"memory grew by {late - early} bytes over 8000 steps"


def _deep_elementwise(device):
    device.seed(1)
    x = Tensor.random([256, 64], device=device)
    w = Tensor.random([64, 64], device=device).require_grad()
    h = x.matmul(w)
    for _ in range(8):
        h = h.mul_scalar(0.9).add_scalar(0.1).sin().exp().tanh()
    return w, h.sum()


def test_balanced_checkpointing_keeps_fewer_bytes_with_identical_gradients():
    w_d, loss_d = _deep_elementwise(Device.flex().autodiff(Checkpointing.DISABLED))
    w_b, loss_b = _deep_elementwise(Device.flex().autodiff(Checkpointing.BALANCED))
    kept_disabled = retained_bytes(loss_d.primitive.node)
    kept_balanced = retained_bytes(loss_b.primitive.node)
    assert kept_balanced < kept_disabled / 4, (kept_balanced, kept_disabled)
    g_d = w_d.grad(loss_d.backward()).to_numpy()
    g_b = w_b.grad(loss_b.backward()).to_numpy()
    np.testing.assert_array_equal(g_d, g_b)


def test_balanced_checkpointing_holds_less_memory_measured_by_tracemalloc():
    def kept(checkpointing):
        gc.collect()
        tracemalloc.start()
        w, loss = _deep_elementwise(Device.flex().autodiff(checkpointing))
        gc.collect()
        current, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del w, loss
        return current

    assert kept(Checkpointing.BALANCED) < kept(Checkpointing.DISABLED) / 3


def test_checkpointing_and_gradients_are_importable_from_ember():
    import ember
    from ember.backend.autodiff import Checkpointing, Gradients

    assert ember.Checkpointing is Checkpointing and ember.Gradients is Gradients
    device = ember.Device.flex().autodiff(ember.Checkpointing.BALANCED)
    x = ember.Tensor.from_floats([1.0, 2.0], device=device).require_grad()
    grads = x.mul(x).sum().backward()
    assert isinstance(grads, ember.Gradients) and x.grad(grads).tolist() == [2.0, 4.0]
