"""``Tensor.register_hook`` against ``torch.Tensor.register_hook``: hooks that
rewrite the gradient of leaves (parameters) and of intermediate results, chains of
hooks, removal, hooks under ``create_graph`` and under a data-parallel gradient hook."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.backend.autodiff.hooks import leaf_grad_hook
from ember.errors import DTypeError, GraphError, ShapeError
from tests.conftest import DEVICE_NAMES, assert_close, make_device

AUTODIFF = [name for name in DEVICE_NAMES if name.endswith("autodiff")]


@pytest.fixture(params=AUTODIFF)
def ad(request):
    return make_device(request.param)


def test_hooks_on_a_leaf_and_an_intermediate_match_torch(ad, torch, rng):
    data = rng.uniform(-2.0, 2.0, size=(3, 2)).astype(np.float32)
    x = Tensor.from_data(data, device=ad).require_grad()
    tx = torch.tensor(data, dtype=torch.float64, requires_grad=True)
    calls = []
    h = x.mul(x).add_scalar(1.0)
    th = tx * tx + 1.0
    h.register_hook(lambda g: g.clamp(-0.5, 0.5))  # clip what flows back through h
    th.register_hook(lambda g: g.clamp(-0.5, 0.5))
    h.register_hook(lambda g: calls.append(g.dims()))  # None: keeps the gradient
    x.register_hook(lambda g: g.mul_scalar(10.0))  # chained, in registration order
    tx.register_hook(lambda g: g * 10.0)
    x.register_hook(lambda g: g.add_scalar(1.0))
    tx.register_hook(lambda g: g + 1.0)
    loss = h.mul(h).mul(x).sum()
    (th * th * tx).sum().backward()
    assert_close(x.grad(loss.backward()), tx.grad.numpy(), rtol=1e-5, atol=1e-5)
    assert calls == [[3, 2]]


def test_a_removed_hook_no_longer_runs(ad):
    x = Tensor.from_floats([1.0, 2.0], device=ad).require_grad()
    handle = x.register_hook(lambda g: g.mul_scalar(0.0))
    kept = x.register_hook(lambda g: g.add_scalar(1.0))
    assert_close(x.grad(x.mul(x).sum().backward()), [1.0, 1.0])
    handle.remove()
    handle.remove()  # twice: nothing happens
    assert_close(x.grad(x.mul(x).sum().backward()), [3.0, 5.0])
    with kept:  # a handle is also a context manager that removes the hook
        pass
    assert_close(x.grad(x.mul(x).sum().backward()), [2.0, 4.0])


def test_a_parameter_hook_reaches_gradients_params():
    from ember.nn import LinearConfig
    from ember.optim import GradientsParams, SgdConfig

    ad = Device.flex().autodiff()
    linear = LinearConfig(3, 2).init(ad)
    x = Tensor.from_floats([[1.0, 2.0, 3.0]], device=ad)
    linear.weight.val().register_hook(lambda g: g.mul_scalar(0.0).add_scalar(7.0))
    grads = GradientsParams.from_grads(linear(x).sum().backward(), linear)
    assert_close(grads.get(linear.weight.id), np.full((3, 2), 7.0))
    assert_close(grads.get(linear.bias.id), [1.0, 1.0])  # not hooked
    stepped = SgdConfig().init().step(1.0, linear, grads)
    assert_close(stepped.weight.val(), linear.weight.val().to_numpy() - 7.0)


def test_hooks_under_create_graph_see_tracked_gradients():
    ad = Device.flex().autodiff()
    x = Tensor.from_floats([1.0, 2.0], device=ad, dtype="float64").require_grad()
    seen = []
    y = x.powi_scalar(3)

    def double(g):
        seen.append((g.device, g.is_require_grad()))
        return g.mul_scalar(2.0)

    y.register_hook(double)
    g = x.grad(y.sum().backward(create_graph=True))  # 2 * 3 x^2
    assert seen == [(ad, False)]  # the seed (ones) is a constant of the new graph
    assert_close(g, [6.0, 24.0])
    square = x.register_hook(lambda g: g.mul(g))  # the hook's own ops are differentiated
    g = x.grad(x.powi_scalar(3).sum().backward(create_graph=True))  # (3 x^2)^2 = 9 x^4
    assert g.is_require_grad()
    assert_close(g, [9.0, 144.0])
    with square:  # still there in the next backward: (36 x^3)^2
        assert_close(x.grad(g.sum().backward(retain_graph=True)), [1296.0, 82944.0])
    assert_close(x.grad(g.sum().backward()), [36.0, 288.0])  # removed: 36 x^3


def test_a_hook_on_the_loss_and_with_a_data_parallel_hook():
    ad = Device.flex().autodiff()
    x = Tensor.from_floats([1.0, 2.0], device=ad).require_grad()
    loss = x.mul(x).sum()
    loss.register_hook(lambda g: g.mul_scalar(3.0))  # the seed itself
    x.register_hook(lambda g: g.add_scalar(1.0))
    reported = {}
    with leaf_grad_hook(lambda node_id, g: reported.setdefault(node_id, g)):
        grads = loss.backward()
    assert_close(x.grad(grads), [7.0, 13.0])
    assert_close(Tensor(next(iter(reported.values())), Device.flex()), [7.0, 13.0])
    leaf = Tensor.from_floats([2.0], device=ad).require_grad()
    leaf.register_hook(lambda g: g.mul_scalar(5.0))
    assert_close(leaf.grad(leaf.backward()), [5.0])  # the root is the hooked leaf


def test_hook_errors():
    ad = Device.flex().autodiff()
    x = Tensor.from_floats([1.0, 2.0], device=ad).require_grad()
    with pytest.raises(GraphError, match="does not require grad"):
        Tensor.from_floats([1.0], device=ad).register_hook(lambda g: g)
    with pytest.raises(GraphError, match="has no autodiff"):
        Tensor.from_floats([1.0], device=Device.flex()).register_hook(lambda g: g)
    with pytest.raises(DTypeError, match="expected a function"):
        x.register_hook(3)

    def wrong_shape(g):
        return g.sum()

    x.register_hook(wrong_shape)
    with pytest.raises(ShapeError, match=r"the hook wrong_shape returned a gradient of shape \[1\].*shape \[2\]"):
        x.mul(x).sum().backward()
