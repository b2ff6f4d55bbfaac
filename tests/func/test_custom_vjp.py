"""``ember.func.custom_vjp`` (JAX's ``custom_vjp``) with ``grad``, ``value_and_grad``,
``vjp`` and ``backward``: against torch, analytic second derivatives, errors."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import ConfigError, GraphError
from ember.func import custom_vjp, grad, value_and_grad, vjp
from tests.conftest import DEVICE_NAMES, assert_close, make_device

AUTODIFF = [name for name in DEVICE_NAMES if name.endswith("autodiff")]


@custom_vjp
def sin_times(x, y):
    return x.sin().mul(y)


def _sin_times_fwd(x, y):
    return sin_times(x, y), (x.cos(), x.sin(), y)


def _sin_times_bwd(res, g):
    cos_x, sin_x, y = res
    return cos_x.mul(g).mul(y), sin_x.mul(g)


sin_times.defvjp(_sin_times_fwd, _sin_times_bwd)


@partial(custom_vjp, nondiff_argnums=(0, 1))
def clip_gradient(lo, hi, x):
    return x


clip_gradient.defvjp(lambda lo, hi, x: (x, None), lambda lo, hi, res, g: (g.clamp(lo, hi),))


@pytest.mark.parametrize("name", AUTODIFF)
def test_grad_and_value_and_grad_match_torch(name, torch, rng):
    ad = make_device(name)
    a = rng.uniform(-2.0, 2.0, size=(4,)).astype(np.float32)
    b = rng.uniform(-2.0, 2.0, size=(4,)).astype(np.float32)
    x, y = Tensor.from_data(a, device=ad), Tensor.from_data(b, device=ad)
    tx = torch.tensor(a, dtype=torch.float64, requires_grad=True)
    ty = torch.tensor(b, dtype=torch.float64, requires_grad=True)

    def loss(x, y):
        return clip_gradient(-0.5, 0.5, sin_times(x, y).mul_scalar(3.0)).mul(x).sum()

    value, (gx, gy) = value_and_grad(loss, argnums=(0, 1))(x, y)
    out = 3.0 * tx.sin() * ty
    out.register_hook(lambda g: g.clamp(-0.5, 0.5))
    tloss = (out * tx).sum()
    tloss.backward()
    assert_close(value, [tloss.item()], rtol=1e-5, atol=1e-5)
    assert_close(gx, tx.grad.numpy(), rtol=1e-5, atol=1e-5)
    assert_close(gy, ty.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_second_derivative_goes_through_the_residuals():
    ad = Device.flex().autodiff()
    v = np.array([0.5, 1.0, -2.0])
    x = Tensor.from_data(v, device=ad)
    y = Tensor.from_floats([2.0, 3.0, -1.0], device=ad, dtype="float64")
    d2 = grad(lambda x: grad(lambda x: sin_times(x, y).sum())(x).sum())(x)
    assert_close(d2, -np.sin(v) * np.array([2.0, 3.0, -1.0]), rtol=1e-12)


def test_vjp_and_backward_with_two_outputs():
    @custom_vjp
    def polar(r, t):
        return r.mul(t.cos()), r.mul(t.sin())

    def fwd(r, t):
        return polar(r, t), (r, t)

    def bwd(res, cot):
        r, t = res
        gx, gy = cot
        return gx.mul(t.cos()).add(gy.mul(t.sin())), r.mul(gy.mul(t.cos()).sub(gx.mul(t.sin())))

    polar.defvjp(fwd, bwd)
    ad = Device.flex().autodiff()
    r = Tensor.from_floats([2.0], device=ad, dtype="float64")
    t = Tensor.from_floats([0.3], device=ad, dtype="float64")
    _, fn = vjp(lambda r, t: polar(r, t)[0], r, t)  # only the first output: zero cotangent for the other
    gr, gt = fn(Tensor.from_floats([1.0], device=ad, dtype="float64"))
    assert_close(gr, [np.cos(0.3)], rtol=1e-12)
    assert_close(gt, [-2.0 * np.sin(0.3)], rtol=1e-12)
    rr, tt = r.require_grad(), t.require_grad()
    xo, yo = polar(rr, tt)
    grads = xo.add(yo).sum().backward()
    assert_close(rr.grad(grads), [np.cos(0.3) + np.sin(0.3)], rtol=1e-12)
    assert_close(tt.grad(grads), [2.0 * (np.cos(0.3) - np.sin(0.3))], rtol=1e-12)


def test_plain_calls_and_errors():
    x = Tensor.from_floats([1.0, 2.0], device=Device.flex())
    assert_close(sin_times(x, x), np.sin([1.0, 2.0]) * [1.0, 2.0])  # nothing tracked: fun itself

    @custom_vjp
    def f(x):
        return x.exp()

    ad = Device.flex().autodiff()
    t = Tensor.from_floats([1.0, 2.0], device=ad).require_grad()
    with pytest.raises(GraphError, match=r"call f.defvjp\(fwd, bwd\) first"):
        f(t)
    f.defvjp(lambda x: (f(x), x), lambda x, g: g.mul(x.exp()))  # not a tuple
    with pytest.raises(GraphError, match=r"custom_vjp\(f\): bwd must return a tuple"):
        f(t).sum().backward()
    f.defvjp(lambda x: (f(x), x), lambda x, g: (g, g))
    with pytest.raises(GraphError, match=r"bwd returned 2 cotangent\(s\), but the function takes 1"):
        f(t).sum().backward()
    f.defvjp(lambda x: f(x), lambda x, g: (g,))
    with pytest.raises(GraphError, match="fwd must return a pair"):
        f(t)
    with pytest.raises(ConfigError, match="expected a function"):
        custom_vjp(3)
