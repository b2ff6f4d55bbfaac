"""``register_pytree_node``: classes with their own flatten pass into and out of a
compiled function; ``GradientsParams`` is one (a compiled step may return gradients)."""

from __future__ import annotations

import numpy as np

import ember
from ember import Device, Distribution, Tensor
from ember.capture import register_pytree_node
from ember.nn.loss import MseLoss, Reduction
from ember.optim import AdamConfig, GradientsParams
from tests.conftest import assert_close
from tests.shared_models import Mlp


class Bag:
    """Not a dataclass: its own flatten (a dict of tensors, keys as the aux data)."""

    def __init__(self, items: dict[str, Tensor]):
        self.items = items


register_pytree_node(
    Bag, lambda bag: (tuple(bag.items.values()), tuple(bag.items)), lambda keys, values: Bag(dict(zip(keys, values)))
)


def test_a_registered_class_is_flattened_and_its_aux_data_keys_the_trace(rng):
    @ember.compile
    def double(bag):
        return Bag({k: v.mul_scalar(2.0) for k, v in bag.items.items()})

    for keys in (("a", "b"), ("a", "b"), ("c",)):
        arrays = {k: rng.standard_normal(3).astype(np.float32) for k in keys}
        out = double(Bag({k: Tensor.from_data(a) for k, a in arrays.items()}))
        assert isinstance(out, Bag) and tuple(out.items) == keys
        for k, a in arrays.items():
            assert_close(out.items[k], 2 * a, atol=1e-6)
    assert double.stats["traces"] == 2  # a new key set traced again


def data(device):
    device.seed(3)
    x = Tensor.random([16, 4], Distribution.uniform(-1.0, 1.0), device=device)
    return x, x.matmul(Tensor.from_floats([[1.0], [-2.0], [0.5], [3.0]], device=device))


def loss_and_grads(model, x, y):
    loss = MseLoss().forward(model(x), y, Reduction.MEAN)
    return loss, GradientsParams.from_grads(loss.backward(), model)


def test_a_compiled_function_returns_real_gradients_an_optimizer_steps_with():
    """The gradients are tensors of the call, not the trace's placeholders (the bug: the
    optimizer failed inside the flex Adam kernel on LazyTensor)."""
    device = Device.flex().autodiff()
    x, y = data(device)
    compiled = ember.compile(loss_and_grads)
    runs = {}
    for label, fn in (("eager", loss_and_grads), ("compiled", compiled)):
        device.seed(0)
        model, optim = Mlp.new(device), AdamConfig().init()
        losses = []
        for _ in range(6):
            loss, grads = fn(model, x, y)
            assert isinstance(grads, GradientsParams) and len(grads) == 4
            assert all(type(g.primitive).__name__ == "ndarray" for _, g in grads.items())
            losses.append(loss.into_scalar())
            model = optim.step(1e-2, model, grads)
        runs[label] = losses
    np.testing.assert_allclose(runs["compiled"], runs["eager"], rtol=1e-5)
    assert runs["eager"][-1] < runs["eager"][0]
    assert compiled.stats["traces"] == 1


def test_gradients_pass_into_a_compiled_function():
    device = Device.flex().autodiff()
    x, y = data(device)
    model = Mlp.new(device)
    _, grads = loss_and_grads(model, x, y)

    @ember.compile
    def clipped(grads):
        out = GradientsParams()
        for pid, g in grads.items():
            out.register(pid, g.clamp(-0.01, 0.01))
        return out

    out = clipped(grads)
    assert sorted(out.ids()) == sorted(grads.ids())
    for pid, g in grads.items():
        assert_close(out.get(pid), np.clip(g.to_numpy(), -0.01, 0.01), atol=0)


def test_an_unregistered_dataclass_holding_tensors_is_a_structure(rng):
    """A batch or a step's output: not the trace's placeholders, and no retrace per call."""
    from dataclasses import dataclass

    @dataclass
    class Batch:
        x: Tensor
        label: str

    @dataclass
    class Out:
        total: Tensor
        parts: list

    @ember.compile
    def step(batch):
        return Out(batch.x.sum(), [batch.x.mul_scalar(2.0)])

    for _ in range(3):
        x = rng.standard_normal(4).astype(np.float32)
        out = step(Batch(Tensor.from_data(x), "b"))
        assert isinstance(out, Out)
        assert_close(out.total, np.array([x.sum()]), atol=1e-5)
        assert_close(out.parts[0], 2 * x, atol=1e-6)
    assert step.stats["traces"] == 1


def test_static_arguments_between_tensors_replay_on_the_fast_path(rng):
    """None, ints and strings among the arguments are static (not leaves): the fast path
    of a repeated call must hand the plan only the leaves (it handed it the whole
    argument list, and the third call raised a raw AttributeError on None)."""
    device = Device.flex().autodiff()
    x_np = rng.standard_normal((3, 4)).astype(np.float32)
    y_np = rng.standard_normal((3, 4)).astype(np.float32)
    x, y = Tensor.from_data(x_np, device=device), Tensor.from_data(y_np, device=device)

    def fn(a, mask, b, power, mode):
        out = a * b if mask is None else a * b * mask
        out = out**power
        return out.sum() if mode == "sum" else out.mean()

    compiled = ember.compile(fn)
    for _ in range(4):
        got = compiled(x, None, y, 2, "sum")
        assert_close(got.to_numpy()[0], np.sum((x_np.astype(np.float64) * y_np) ** 2), rtol=1e-5)
    got = compiled(x, None, y, 2, "mean")  # another static value: another trace
    assert_close(got.to_numpy()[0], np.mean((x_np.astype(np.float64) * y_np) ** 2), rtol=1e-5)
    assert compiled.stats["traces"] == 2
    assert compiled.stats["replays"] == 3
