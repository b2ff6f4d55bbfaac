"""GELU on a fusion device: recorded as one ``gelu`` node (and its gradient as one
``gelu_backward``), so that autodiff keeps only the input, and expanded by the
compiled targets into a kernel fused with what surrounds it (a linear layer's bias
add). Values and gradients against eager flex and torch, special values included."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import ember
from ember import Device, Tensor
from ember.backend.fusion.steps import Library
from ember.nn import functional as F


def _values(rng, dtype) -> np.ndarray:
    x = (rng.standard_normal((6, 33)) * 3).astype(dtype)
    x.flat[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 12.0, -12.0, 1e-30]
    return x


def _step(x, bias):
    h = F.gelu(x.add(bias))
    loss = h.mul(h).sum()
    grads = loss.backward()
    return h, x.grad(grads)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_compiled_gelu_and_its_gradient_match_eager_and_torch(dtype, rng, torch):
    x_np = _values(rng, dtype)
    b_np = rng.standard_normal(33).astype(dtype)
    device = Device.flex().autodiff()
    x = Tensor.from_data(x_np, device=device).require_grad()
    bias = Tensor.from_data(b_np, device=device)
    compiled = ember.compile(_step)
    for _ in range(3):  # traced, then planned, then run compiled
        h, g = (t.to_data().to_numpy() for t in compiled(x, bias))
    h_e, g_e = (t.to_data().to_numpy() for t in _step(x, bias))
    tol = 2e-6 if dtype == np.float32 else 1e-12
    finite = np.isfinite(x_np)
    np.testing.assert_allclose(h[finite], h_e[finite], rtol=tol, atol=tol)
    np.testing.assert_allclose(g[finite], g_e[finite], rtol=tol, atol=tol)
    assert np.isnan(h[np.isnan(x_np)]).all() and np.isnan(g[np.isnan(x_np)]).all()
    if dtype == np.float32:  # flex's formula (the row kernel): NaN at the infinities, as flex and torch
        np.testing.assert_array_equal(np.isnan(h), np.isnan(h_e))

    xt = torch.tensor(x_np, requires_grad=True)
    ht = torch.nn.functional.gelu(xt + torch.tensor(b_np))
    (ht * ht).sum().backward()
    np.testing.assert_allclose(h[finite], ht.detach().numpy()[finite], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g[finite], xt.grad.numpy()[finite], rtol=1e-5, atol=1e-5)

    entry = next(iter(compiled._entries.values()))
    ops = collections.Counter(n.op for n in entry.graph.nodes)
    assert ops["gelu"] == 1 and ops["gelu_backward"] == 1 and ops["unary"] == 0
    steps = entry.plan.variants[-1].schedule.steps
    library = sorted(s.node.op for s in steps if isinstance(s, Library))
    assert library == (["gelu", "gelu_backward"] if dtype == np.float32 else [])  # float64: expanded


def test_a_fusion_device_records_gelu_as_one_node():
    device = Device.flex().fusion()
    x = Tensor.from_data(np.linspace(-4, 4, 12, dtype=np.float32), device=device)
    out = F.gelu(x).to_data().to_numpy()
    eager = F.gelu(Tensor.from_data(np.linspace(-4, 4, 12, dtype=np.float32))).to_data().to_numpy()
    np.testing.assert_allclose(out, eager, rtol=2e-6, atol=1e-7)
