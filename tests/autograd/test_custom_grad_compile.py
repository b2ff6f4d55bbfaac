"""A custom backward under ``ember.compile``: traced as written (no fallback to eager),
and the compiled training step leaves the same model as the eager one."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ember
from ember import Device, Distribution, Module, Tensor
from ember.autograd import Function
from ember.capture import CompileWarning
from ember.func import custom_vjp
from ember.nn import Linear, LinearConfig
from ember.nn.loss import MseLoss, Reduction
from ember.optim import GradientsParams, SgdConfig
from tests.conftest import make_device


class SoftClip(Function):
    """tanh-like squashing x / (1 + |x|), with its derivative 1 / (1 + |x|)^2 written by hand."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.div(x.abs().add_scalar(1.0))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        d = x.abs().add_scalar(1.0)
        return g.div(d.mul(d))


@custom_vjp
def scale_grad(x):
    return x


scale_grad.defvjp(lambda x: (x, None), lambda res, g: (g.mul_scalar(0.5),))


class Net(Module):
    l1: Linear
    l2: Linear

    def forward(self, x: Tensor) -> Tensor:
        h = SoftClip.apply(self.l1(x))
        h.register_hook(lambda g: g.clamp(-0.05, 0.05))
        return self.l2(scale_grad(h))


def _train(device: Device, steps: int, compiled: bool):
    device.seed(7)
    x = Tensor.random([16, 4], Distribution.uniform(-1.0, 1.0), device=device)
    y = x.matmul(Tensor.from_floats([[1.0], [-2.0], [0.5], [3.0]], device=device))
    model = Net(l1=LinearConfig(4, 8).init(device), l2=LinearConfig(8, 1).init(device))
    optim = SgdConfig().init()

    def train_step(model, x, y):
        loss = MseLoss().forward(model(x), y, Reduction.MEAN)
        return optim.step(0.1, model, GradientsParams.from_grads(loss.backward(), model)), loss

    step = ember.compile(train_step) if compiled else train_step
    losses = []
    for _ in range(steps):
        model, loss = step(model, x, y)
        losses.append(loss.into_scalar())
    return np.array(losses), [p.val().to_numpy() for p in model.params()], step


@pytest.mark.parametrize("name", ["flex+autodiff", "cube+autodiff"])
def test_a_compiled_step_with_custom_gradients_matches_eager(name):
    device = make_device(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)  # a fallback to eager fails the test
        compiled, params_c, step = _train(device, 6, True)
    eager, params_e, _ = _train(device, 6, False)
    assert step.stats["eager"] == 0 and step.stats["replays"] >= 4
    np.testing.assert_allclose(compiled, eager, rtol=1e-5, atol=1e-7)
    for a, b in zip(params_c, params_e):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert eager[-1] < eager[0]
