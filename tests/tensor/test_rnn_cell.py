"""The fused LSTM and GRU cells (``ember.tensor.rnn_cell``, ``FusedOp.LSTM_CELL``, ``GRU_CELL``):
values on every device against float64 numpy, gradients against torch, flex's kernel
against the composite (values, gradients, special values), finite differences and a
second-order case through the kernel's autodiff rule, and the layer that runs it
(``Lstm``) against ``torch.nn.LSTM``."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.backend.composites import COMPOSITES
from ember.backend.flex import native
from ember.errors import ShapeError
from ember.tensor.rnn_cell import gru_cell, lstm_cell
from tests.autodiff.gradcheck import check_grad
from tests.autodiff.second_order import ember_hvp, numeric_hvp
from tests.conftest import assert_close


def lstm_cell_composite(gates: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
    """The LSTM cell's composite over the device's backend (differentiated op by op on autodiff)."""
    h, c_new = COMPOSITES["lstm_cell"](gates.device._backend, gates.primitive, c.primitive)
    return Tensor(h, gates.device), Tensor(c_new, gates.device)


def gru_cell_composite(xp: Tensor, hp: Tensor, h: Tensor) -> Tensor:
    return Tensor(COMPOSITES["gru_cell"](xp.device._backend, xp.primitive, hp.primitive, h.primitive), xp.device)


B, H = 3, 5


@pytest.fixture(params=["native", "numpy"])
def path(request, monkeypatch):
    """Runs a test on flex's native LSTM kernels and again on its numpy versions."""
    kernels = native.kernels()
    if request.param == "numpy":
        monkeypatch.setitem(native._STATE, "kernels", None)
    elif kernels is None:
        pytest.skip("native kernels are unavailable on this machine")
    else:
        monkeypatch.setattr(native, "MIN_ELEMENTS", 0)  # the tests' small arrays take the native path too
    return request.param


def _inputs(rng, scale: float = 2.0, dtype=np.float32):
    return (rng.standard_normal((B, 4 * H)) * scale).astype(dtype), rng.standard_normal((B, H)).astype(dtype)


def _reference(z: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    z, c = z.astype(np.float64), c.astype(np.float64)
    i, f, g, o = (z[:, k * H : (k + 1) * H] for k in range(4))
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    c_new = sig(f) * c + sig(i) * np.tanh(g)
    return sig(o) * np.tanh(c_new), c_new


def test_values_on_every_device(device, rng):
    z, c = _inputs(rng)
    h, c_new = lstm_cell(Tensor.from_data(z, device=device), Tensor.from_data(c, device=device))
    ref_h, ref_c = _reference(z, c)
    assert h.dims() == [B, H] and c_new.dims() == [B, H]
    assert_close(h, ref_h, rtol=1e-5, atol=1e-6)
    assert_close(c_new, ref_c, rtol=1e-5, atol=1e-6)


@pytest.mark.torch
@pytest.mark.parametrize("through", ["both", "h", "c"])
def test_gradients_on_every_autodiff_device_against_torch(device, rng, torch, through):
    if not device.is_autodiff():
        device = device.autodiff()
    z, c = _inputs(rng)
    wh, wc = rng.uniform(0.5, 1.5, (B, H)).astype(np.float32), rng.uniform(0.5, 1.5, (B, H)).astype(np.float32)
    tz, tc = Tensor.from_data(z, device=device).require_grad(), Tensor.from_data(c, device=device).require_grad()
    h, c_new = lstm_cell(tz, tc)
    terms = {
        "h": h.mul(Tensor.from_data(wh, device=device)).sum(),
        "c": c_new.mul(Tensor.from_data(wc, device=device)).sum(),
    }
    loss = terms["h"].add(terms["c"]) if through == "both" else terms[through]
    grads = loss.backward()

    rz, rc = (
        torch.tensor(z, dtype=torch.float64, requires_grad=True),
        torch.tensor(c, dtype=torch.float64, requires_grad=True),
    )
    i, f, g, o = rz.chunk(4, -1)
    r_c = torch.sigmoid(f) * rc + torch.sigmoid(i) * torch.tanh(g)
    r_h = torch.sigmoid(o) * torch.tanh(r_c)
    r_terms = {"h": (r_h * torch.from_numpy(wh).double()).sum(), "c": (r_c * torch.from_numpy(wc).double()).sum()}
    (r_terms["h"] + r_terms["c"] if through == "both" else r_terms[through]).backward()
    assert_close(tz.grad(grads), rz.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert_close(tc.grad(grads), rc.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("through", ["both", "h", "c"])
@pytest.mark.parametrize("scale", [1.0, 30.0, 1e4])
def test_flex_kernel_matches_the_composite(rng, scale, path, through):
    """flex's kernel and the composite differentiated op by op agree, also where the
    gates saturate (large pre-activations: finite values, zero-ish gradients)."""
    device = Device.flex().autodiff()
    z, c = _inputs(rng, scale)
    results = []
    for fn in (lstm_cell, lstm_cell_composite):
        tz, tc = Tensor.from_data(z, device=device).require_grad(), Tensor.from_data(c, device=device).require_grad()
        h, c_new = fn(tz, tc)
        terms = {"h": h.mul_scalar(1.5).sum(), "c": c_new.mul_scalar(-0.5).sum()}
        grads = (terms["h"].add(terms["c"]) if through == "both" else terms[through]).backward()
        results.append([h.to_numpy(), c_new.to_numpy(), tz.grad(grads).to_numpy(), tc.grad(grads).to_numpy()])
    for ours, composite in zip(*results):
        assert np.isfinite(ours).all()
        np.testing.assert_allclose(ours, composite, rtol=1e-5, atol=1e-6)


def test_special_values_propagate(flex, path):
    z = np.zeros((1, 4 * H), np.float32)
    z[0, 0], z[0, H + 1], z[0, 2 * H + 2], z[0, 3 * H + 3] = np.inf, -np.inf, np.inf, np.nan
    c = np.ones((1, H), np.float32)
    h, c_new = lstm_cell(Tensor.from_data(z, device=flex), Tensor.from_data(c, device=flex))
    hc, cc = lstm_cell_composite(Tensor.from_data(z, device=flex), Tensor.from_data(c, device=flex))
    np.testing.assert_allclose(h.to_numpy(), hc.to_numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(c_new.to_numpy(), cc.to_numpy(), rtol=1e-6, atol=1e-7)
    assert np.isnan(h.to_numpy()[0, 3]) and not np.isnan(h.to_numpy()[0, :3]).any()


def test_one_step_of_a_large_cell_takes_the_native_kernel(rng):
    """A step of the benchmark's size (32 x 4 * 128 gate values) runs the native loops
    by default; they agree with the float64 numpy path, forward and backward."""
    from ember.backend.flex import lstm_cell as flex_cell

    if native.kernels() is None:
        pytest.skip("native kernels are unavailable on this machine")
    z = (rng.standard_normal((32, 1, 512)) * 3).astype(np.float32)
    c, gh, gc = (rng.standard_normal((32, 1, 128)).astype(np.float32) for _ in range(3))
    assert z.size >= native.MIN_ELEMENTS
    h, c_new = flex_cell.lstm_cell(z, c)
    h64, c64 = flex_cell.lstm_cell(z.astype(np.float64), c.astype(np.float64))
    np.testing.assert_allclose(h, h64, atol=1e-6)
    np.testing.assert_allclose(c_new, c64, atol=1e-6)
    d, dc = flex_cell.lstm_cell_backward(z, c, c_new, gh, gc)
    d64, dc64 = flex_cell.lstm_cell_backward(
        z.astype(np.float64), c.astype(np.float64), c64, gh.astype(np.float64), gc.astype(np.float64)
    )
    np.testing.assert_allclose(d, d64, atol=2e-6)
    np.testing.assert_allclose(dc, dc64, atol=2e-6)


def test_finite_differences_float64(rng):
    z, c = _inputs(rng, dtype=np.float64)

    def fn(a, b):
        h, c_new = lstm_cell(a, b)
        return h.add(c_new.mul_scalar(0.3))

    check_grad(fn, [z, c], rtol=1e-6, atol=1e-8)


def test_second_order_through_the_kernel_rule(rng):
    z, c = _inputs(rng, scale=1.0, dtype=np.float64)

    def fn(a, b):
        h, c_new = lstm_cell(a, b)
        return h.mul(c_new)

    ours = ember_hvp(fn, [z, c], [0, 1])
    numeric = numeric_hvp(fn, [z, c], [0, 1])
    for i in (0, 1):
        np.testing.assert_allclose(ours[i], numeric[i], rtol=1e-5, atol=1e-7)


def test_half_precision_takes_the_composite(flex, rng):
    z, c = _inputs(rng, scale=1.0)
    h, c_new = lstm_cell(
        Tensor.from_data(z, device=flex).cast("float16"), Tensor.from_data(c, device=flex).cast("float16")
    )
    ref_h, ref_c = _reference(z, c)
    assert h.to_numpy().dtype == np.float16 and c_new.to_numpy().dtype == np.float16
    assert_close(h, ref_h, rtol=1e-2, atol=1e-2)
    assert_close(c_new, ref_c, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize(("gates", "cell"), [([2, 20], [2, 4]), ([2, 20], [3, 5]), ([2, 1, 20], [2, 5])])
def test_bad_shapes_name_the_operands(flex, gates, cell):
    with pytest.raises(ShapeError, match=r"lstm_cell: gates must be \[\.\.\., 4 \* H\]"):
        lstm_cell(Tensor.zeros(gates, device=flex), Tensor.zeros(cell, device=flex))


# ---------------------------------------------------------------------- the GRU cell


def _gru_inputs(rng, scale: float = 2.0, dtype=np.float32):
    xp, hp = ((rng.standard_normal((B, 3 * H)) * scale).astype(dtype) for _ in range(2))
    return xp, hp, rng.standard_normal((B, H)).astype(dtype)


def _gru_reference(xp: np.ndarray, hp: np.ndarray, h: np.ndarray) -> np.ndarray:
    xp, hp, h = (a.astype(np.float64) for a in (xp, hp, h))
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    r, z = sig(xp[:, :H] + hp[:, :H]), sig(xp[:, H : 2 * H] + hp[:, H : 2 * H])
    new = np.tanh(xp[:, 2 * H :] + r * hp[:, 2 * H :])
    return (1.0 - z) * new + z * h


def test_gru_values_on_every_device(device, rng):
    arrays = _gru_inputs(rng)
    out = gru_cell(*(Tensor.from_data(a, device=device) for a in arrays))
    assert_close(out, _gru_reference(*arrays), rtol=1e-5, atol=1e-6)


@pytest.mark.torch
def test_gru_gradients_on_every_autodiff_device_against_torch(device, rng, torch):
    if not device.is_autodiff():
        device = device.autodiff()
    arrays = _gru_inputs(rng)
    w = rng.uniform(0.5, 1.5, (B, H)).astype(np.float32)
    ts = [Tensor.from_data(a, device=device).require_grad() for a in arrays]
    grads = gru_cell(*ts).mul(Tensor.from_data(w, device=device)).sum().backward()
    rs = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    xr, xz, xn = rs[0].chunk(3, -1)
    hr, hz, hn = rs[1].chunk(3, -1)
    r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
    new = torch.tanh(xn + r * hn)
    (((1 - z) * new + z * rs[2]) * torch.from_numpy(w).double()).sum().backward()
    for t, ref in zip(ts, rs):
        assert_close(t.grad(grads), ref.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("scale", [1.0, 30.0, 1e4])
def test_gru_flex_kernel_matches_the_composite(rng, scale):
    device = Device.flex().autodiff()
    arrays = _gru_inputs(rng, scale)
    results = []
    for fn in (gru_cell, gru_cell_composite):
        ts = [Tensor.from_data(a, device=device).require_grad() for a in arrays]
        out = fn(*ts)
        grads = out.mul_scalar(1.5).sum().backward()
        results.append([out.to_numpy(), *(t.grad(grads).to_numpy() for t in ts)])
    for ours, composite in zip(*results):
        assert np.isfinite(ours).all()
        np.testing.assert_allclose(ours, composite, rtol=1e-5, atol=1e-6)


def test_gru_finite_differences_and_second_order_float64(rng):
    arrays = list(_gru_inputs(rng, scale=1.0, dtype=np.float64))
    check_grad(lambda a, b, c: gru_cell(a, b, c), arrays, rtol=1e-6, atol=1e-8)

    def fn(a, b, c):
        out = gru_cell(a, b, c)
        return out.mul(out)

    ours = ember_hvp(fn, arrays, [0, 1, 2])
    numeric = numeric_hvp(fn, arrays, [0, 1, 2])
    for i in (0, 1, 2):
        np.testing.assert_allclose(ours[i], numeric[i], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(("xp", "hp", "h"), [([2, 15], [2, 15], [2, 4]), ([2, 15], [2, 12], [2, 5])])
def test_gru_bad_shapes_name_the_operands(flex, xp, hp, h):
    with pytest.raises(ShapeError, match=r"gru_cell: xp and hp must be \[\.\.\., 3 \* H\]"):
        gru_cell(*(Tensor.zeros(s, device=flex) for s in (xp, hp, h)))
