"""complex64 elementwise ops and reductions on fusion devices: one recorded stream
mixing real and complex ops runs as one plan (one flush, no op-by-op fallback), its
real ops compiled into kernels and its complex nodes run as calls of the wrapped
backend inside the plan, with the values of flex (and numpy in float64)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ember
from ember import Device, Tensor
from ember.backend.fusion.steps import Call
from ember.backend.kernel.steps import Kernel
from ember.errors import FallbackWarning
from tests.conftest import make_device
from tests.fft.helpers import assert_complex_close


def _chain(x: Tensor, y: Tensor, r: Tensor) -> list[Tensor]:
    """Real ops feeding complex ones feeding real ones, and complex reductions."""
    scale = r.exp().mul(0.5).add(1.0)  # real, fusable
    z = ember.polar(scale, r.mul(0.25))  # real -> complex
    w = x.mul(y).add(z).sub(y.conj()).div(z.add(2.0)).exp().mul(1j)
    magnitude = w.abs().add(r).tanh()  # complex -> real, then fusable real ops
    return [w, magnitude, w.sum_dim(1), x.real().mul(y.imag()).add(w.angle()), w.mean()]


def _oracle(a: np.ndarray, b: np.ndarray, r: np.ndarray) -> list[np.ndarray]:
    scale = np.exp(r) * 0.5 + 1.0
    z = scale * np.exp(1j * r * 0.25)
    w = np.exp((a * b + z - np.conj(b)) / (z + 2.0)) * 1j
    return [w, np.tanh(np.abs(w) + r), w.sum(1, keepdims=True), a.real * b.imag + np.angle(w), np.array([w.mean()])]


@pytest.mark.parametrize("name", ["flex+fusion", "flex+fusion+autodiff", "cube+fusion"])
def test_a_mixed_stream_runs_as_one_plan_with_flex_values(name, rng):
    device = make_device(name)
    a = (rng.standard_normal((6, 33)) + 1j * rng.standard_normal((6, 33))).astype(np.complex64)
    b = (rng.standard_normal((6, 33)) + 1j * rng.standard_normal((6, 33))).astype(np.complex64)
    r = rng.standard_normal((6, 33)).astype(np.float32)
    device.sync()
    backend = device.backend
    while not hasattr(backend, "stats"):  # the fusion layer under autodiff
        backend = backend.inner
    before = backend.stats["flushes"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        outs = _chain(*(Tensor.from_data(v, device=device) for v in (a, b, r)))
        device.sync()
    assert backend.stats["flushes"] == before + 1  # one stream, one plan: no graph break
    flex = [t.to_numpy() for t in _chain(*(Tensor.from_data(v, device=Device.flex()) for v in (a, b, r)))]
    wide = _oracle(a.astype(np.complex128), b.astype(np.complex128), r.astype(np.float64))
    for ours, theirs, exact in zip(outs, flex, wide):
        assert ours.dtype.name == ("COMPLEX64" if theirs.dtype.kind == "c" else "FLOAT32")
        assert_complex_close(ours, theirs, rtol=2e-6, atol=2e-6)
        assert_complex_close(ours, exact, rtol=2e-5, atol=2e-5)
    plan = backend._newest[1] if backend._newest is not None else None
    schedule = getattr(plan, "schedule", None)
    if schedule is not None:  # the LLVM plan: real ops in kernels, complex nodes as calls
        assert any(isinstance(s, Kernel) for s in schedule.steps)
        calls = [s for s in schedule.steps if isinstance(s, Call)]
        assert calls and all(
            any(schedule.graph.avals[v].dtype.kind == "c" for v in (*s.node.refs(), *s.node.outs)) for s in calls
        )


def test_complex_gradients_through_a_fusion_stream(rng):
    """d/dx of a real loss of complex ops on flex+fusion+autodiff equals flex+autodiff."""
    a = (rng.standard_normal((4, 5)) + 1j * rng.standard_normal((4, 5))).astype(np.complex64)
    r = rng.standard_normal((4, 5)).astype(np.float32)
    grads = []
    for device in (Device.flex().autodiff(), Device.flex().fusion().autodiff()):
        x = Tensor.from_data(a, device=device).require_grad()
        q = Tensor.from_data(r, device=device).require_grad()
        loss = x.mul(ember.polar(q.exp(), q)).exp().abs().add(q.sin()).sum()
        g = loss.backward()
        grads.append((x.grad(g).to_numpy(), q.grad(g).to_numpy()))
    for ours, theirs in zip(*grads):
        np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=2e-5)
