"""The fused recurrent sequences (``ember.tensor.rnn_sequence``, ``FusedOp.LSTM_SEQUENCE``,
``GRU_SEQUENCE``): values on every device against a float64 numpy loop, gradients on
every autodiff device against torch's autograd of the same loop, flex's kernels against
the composite differentiated op by op (native and numpy cells), ``ember.compile``'s
library steps against eager, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import Device, Tensor
from ember.backend.flex import native
from ember.backend.fusion.llvm import library
from ember.errors import ShapeError
from ember.tensor.rnn_sequence import gru_sequence, lstm_sequence
from tests.autodiff.gradcheck import check_grad
from tests.autodiff.second_order import ember_hvp, numeric_hvp
from tests.conftest import assert_close

S, B, H = 5, 3, 4
LENGTHS = [5, 2, 3]


def _sig(v):
    return 1.0 / (1.0 + np.exp(-v))


def _mask(masked: bool) -> np.ndarray | None:
    if not masked:
        return None
    return (np.arange(S)[:, None] < np.array(LENGTHS)[None, :])[:, :, None]


def _order(reverse: bool) -> range:
    return range(S - 1, -1, -1) if reverse else range(S)


def _lstm_ref(proj, w, h, c, valid, reverse):
    proj, w, h, c = (a.astype(np.float64) for a in (proj, w, h, c))
    y = np.zeros((S, B, H))
    for t in _order(reverse):
        z = proj[t] + h @ w
        i, f, g, o = (z[:, k * H : (k + 1) * H] for k in range(4))
        c_new = _sig(f) * c + _sig(i) * np.tanh(g)
        h_new = _sig(o) * np.tanh(c_new)
        m = np.ones((B, 1), bool) if valid is None else valid[t]
        c, h = np.where(m, c_new, c), np.where(m, h_new, h)
        y[t] = np.where(m, h_new, 0.0)
    return y, h, c


def _gru_ref(proj, w, b_hh, h, valid, reverse):
    proj, w, b_hh, h = (a.astype(np.float64) for a in (proj, w, b_hh, h))
    y = np.zeros((S, B, H))
    for t in _order(reverse):
        hp = h @ w + b_hh
        xp = proj[t]
        r = _sig(xp[:, :H] + hp[:, :H])
        z = _sig(xp[:, H : 2 * H] + hp[:, H : 2 * H])
        n = np.tanh(xp[:, 2 * H :] + r * hp[:, 2 * H :])
        h_new = n + z * (h - n)
        m = np.ones((B, 1), bool) if valid is None else valid[t]
        h = np.where(m, h_new, h)
        y[t] = np.where(m, h_new, 0.0)
    return y, h


def _lstm_inputs(rng):
    return [
        rng.standard_normal((S, B, 4 * H)).astype(np.float32),
        (rng.standard_normal((H, 4 * H)) * 0.5).astype(np.float32),
        rng.standard_normal((B, H)).astype(np.float32),
        rng.standard_normal((B, H)).astype(np.float32),
    ]


def _gru_inputs(rng):
    return [
        rng.standard_normal((S, B, 3 * H)).astype(np.float32),
        (rng.standard_normal((H, 3 * H)) * 0.5).astype(np.float32),
        rng.standard_normal(3 * H).astype(np.float32),
        rng.standard_normal((B, H)).astype(np.float32),
    ]


def _run(kind, arrays, device, valid, reverse, grad=False):
    ts = [Tensor.from_data(a, device=device) for a in arrays]
    if grad:
        ts = [t.require_grad() for t in ts]
    mask = None if valid is None else Tensor.from_data(valid, device=device)
    outs = lstm_sequence(*ts, mask, reverse) if kind == "lstm" else gru_sequence(*ts, mask, reverse)
    return ts, outs


CASES = [(False, False), (True, False), (False, True), (True, True)]


@pytest.mark.parametrize("reverse,masked", CASES)
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_values_on_every_device(device, rng, kind, reverse, masked):
    arrays = _lstm_inputs(rng) if kind == "lstm" else _gru_inputs(rng)
    valid = _mask(masked)
    _, outs = _run(kind, arrays, device, valid, reverse)
    refs = _lstm_ref(*arrays, valid, reverse) if kind == "lstm" else _gru_ref(*arrays, valid, reverse)
    for ours, ref in zip(outs, refs):
        assert ours.dims() == list(ref.shape)
        assert_close(ours, ref, rtol=1e-5, atol=1e-5)


def _torch_loss(torch, kind, tensors, valid, reverse, weights):
    """The same recurrence in torch ops, and the weighted sum of its outputs."""
    if kind == "lstm":
        proj, w, h, c = tensors
    else:
        proj, w, b_hh, h = tensors
    ys = [None] * S
    for t in _order(reverse):
        m = torch.ones((B, 1), dtype=torch.bool) if valid is None else torch.from_numpy(valid[t])
        if kind == "lstm":
            z = proj[t] + h @ w
            i, f, g, o = (z[:, k * H : (k + 1) * H] for k in range(4))
            c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h_new = torch.sigmoid(o) * torch.tanh(c_new)
            c = torch.where(m, c_new, c)
        else:
            hp = h @ w + b_hh
            r = torch.sigmoid(proj[t][:, :H] + hp[:, :H])
            zg = torch.sigmoid(proj[t][:, H : 2 * H] + hp[:, H : 2 * H])
            n = torch.tanh(proj[t][:, 2 * H :] + r * hp[:, 2 * H :])
            h_new = n + zg * (h - n)
        h = torch.where(m, h_new, h)
        ys[t] = torch.where(m, h_new, torch.zeros_like(h_new))
    outs = [torch.stack(ys), h] + ([c] if kind == "lstm" else [])
    return sum((o * torch.from_numpy(wt)).sum() for o, wt in zip(outs, weights))


@pytest.mark.torch
@pytest.mark.parametrize("reverse,masked", CASES)
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_gradients_on_every_autodiff_device_against_torch(device, rng, torch, kind, reverse, masked):
    if not device.is_autodiff():
        device = device.autodiff()
    arrays = _lstm_inputs(rng) if kind == "lstm" else _gru_inputs(rng)
    valid = _mask(masked)
    ts, outs = _run(kind, arrays, device, valid, reverse, grad=True)
    weights = [rng.uniform(0.5, 1.5, o.dims()).astype(np.float32) for o in outs]
    loss = sum(
        (o.mul(Tensor.from_data(w, device=device)).sum() for o, w in zip(outs, weights)),
        Tensor.zeros([], device=device),
    )
    grads = loss.backward()
    t_in = [torch.from_numpy(a).requires_grad_() for a in arrays]
    _torch_loss(torch, kind, t_in, valid, reverse, weights).backward()
    for t, ref in zip(ts, t_in):
        assert_close(t.grad(grads), ref.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.fixture(params=["native", "numpy"])
def path(request, monkeypatch):
    """flex's native LSTM cell kernels (at any size), then its numpy versions."""
    if request.param == "numpy":
        monkeypatch.setitem(native._STATE, "kernels", None)
    elif native.kernels() is None:
        pytest.skip("native kernels are unavailable on this machine")
    else:
        monkeypatch.setattr(native, "MIN_ELEMENTS", 0)
    return request.param


@pytest.mark.parametrize("through", ["y", "h", "c", "all"])
@pytest.mark.parametrize("reverse,masked", CASES)
def test_flex_kernel_matches_the_composite(rng, path, reverse, masked, through, monkeypatch):
    """flex's sequence kernels and the composite differentiated op by op agree (values
    and gradients), whichever outputs the loss reaches."""
    from ember.backend.flex import backend as flex_backend

    arrays, valid = _lstm_inputs(rng), _mask(masked)
    results = []
    for fused in (True, False):
        if not fused:
            monkeypatch.setattr(flex_backend.FlexBackend, "lstm_sequence", lambda *a: NotImplemented)
        ts, outs = _run("lstm", arrays, Device.flex().autodiff(), valid, reverse, grad=True)
        picked = outs if through == "all" else [outs["yhc".index(through)]]
        loss = sum((o.mul_scalar(1.0 + k).sum() for k, o in enumerate(picked)), Tensor.zeros([], device=ts[0].device))
        grads = loss.backward()
        results.append([o.to_numpy() for o in outs] + [t.grad(grads).to_numpy() for t in ts])
    for ours, composite in zip(*results):
        np.testing.assert_allclose(ours, composite, rtol=1e-5, atol=1e-6)


def test_gru_flex_kernel_matches_the_composite(rng, monkeypatch):
    from ember.backend.flex import backend as flex_backend

    arrays, valid = _gru_inputs(rng), _mask(True)
    results = []
    for fused in (True, False):
        if not fused:
            monkeypatch.setattr(flex_backend.FlexBackend, "gru_sequence", lambda *a: NotImplemented)
        ts, outs = _run("gru", arrays, Device.flex().autodiff(), valid, True, grad=True)
        grads = outs[0].mul_scalar(0.5).sum().add(outs[1].sum()).backward()
        results.append([o.to_numpy() for o in outs] + [t.grad(grads).to_numpy() for t in ts])
    for ours, composite in zip(*results):
        np.testing.assert_allclose(ours, composite, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reverse,masked", CASES)
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_compiled_step_runs_the_sequence_as_library_steps(rng, kind, reverse, masked, monkeypatch):
    """Under ``ember.compile`` the sequence and its backward are one library step each
    of the LLVM plan (not ``seq`` unrolled steps), with eager's values and gradients."""
    emitted: list[str] = []
    names = [f"{kind}_sequence", f"{kind}_sequence_backward"]
    for name in names:
        op = library.LIBRARY[name]

        def emit(e, op=op, name=name):
            emitted.append(name)
            op.emit(e)

        monkeypatch.setitem(library.LIBRARY, name, type(op)(op.supports, op.scratch, emit, op.checks))
    arrays, valid = (_lstm_inputs(rng) if kind == "lstm" else _gru_inputs(rng)), _mask(masked)
    device = Device.flex().autodiff()
    mask = None if valid is None else Tensor.from_data(valid, device=device)
    gy = Tensor.from_data(rng.standard_normal((S, B, H)).astype(np.float32), device=device)

    def step(*ts):
        ts = [t.require_grad() for t in ts]
        outs = lstm_sequence(*ts, mask, reverse) if kind == "lstm" else gru_sequence(*ts, mask, reverse)
        loss = outs[0].mul(gy).sum().add(outs[1].sum().mul_scalar(0.3)).add(outs[-1].sum().mul_scalar(-0.7))
        grads = loss.backward()
        return loss, *(t.grad(grads) for t in ts)

    args = [Tensor.from_data(a, device=device) for a in arrays]
    eager = step(*args)
    compiled = ember.compile(step)
    compiled(*args)  # the first call replays; the plan compiles for the next
    ours = compiled(*args)
    assert sorted(set(emitted)) == names
    for a, b in zip(ours, eager):
        assert_close(a, b.to_numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_first_and_second_order_through_the_kernel_rule(rng, kind):
    """float64 gradients by finite differences, and a double backward (the rule's
    ``create_graph`` path: the backward's composite differentiated) against finite
    differences of the gradient; masked and reversed."""
    steps, batch, n, gates = 3, 2, 2, (4 if kind == "lstm" else 3)
    valid = (np.arange(steps)[:, None] < np.array([3, 2])[None, :])[:, :, None]
    arrays = [
        rng.standard_normal((steps, batch, gates * n)),
        rng.standard_normal((n, gates * n)) * 0.5,
        rng.standard_normal(gates * n) if kind == "gru" else rng.standard_normal((batch, n)),
        rng.standard_normal((batch, n)),
    ]

    def fn(*ts):
        mask = Tensor.from_data(valid, device=ts[0].device)
        outs = lstm_sequence(*ts, mask, True) if kind == "lstm" else gru_sequence(*ts, mask, True)
        return outs[0].reshape([steps, batch * n]).sum_dim(0).reshape([batch, n]).mul(outs[-1])

    check_grad(fn, arrays, rtol=1e-6, atol=1e-8)
    wrt = [0, 1, 2, 3]
    ours, numeric = ember_hvp(fn, arrays, wrt), numeric_hvp(fn, arrays, wrt)
    for i in wrt:
        np.testing.assert_allclose(ours[i], numeric[i], rtol=1e-5, atol=1e-7)


def test_errors_name_the_shapes():
    proj, w = Tensor.zeros([S, B, 4 * H]), Tensor.zeros([H, 4 * H])
    h = Tensor.zeros([B, H])
    with pytest.raises(ShapeError, match=r"w_hh \[H, 4 \* H\]"):
        lstm_sequence(proj, Tensor.zeros([H, 3 * H]), h, h)
    with pytest.raises(ShapeError, match="initial state must be"):
        lstm_sequence(proj, w, Tensor.zeros([B + 1, H]), h)
    with pytest.raises(ShapeError, match="valid must be a bool"):
        lstm_sequence(proj, w, h, h, Tensor.ones([S, B, 1]))
    with pytest.raises(ShapeError, match="b_hh must be"):
        gru_sequence(Tensor.zeros([S, B, 3 * H]), Tensor.zeros([H, 3 * H]), Tensor.zeros([H]), h)
