"""The recurrent sequences at a hidden size where the inline matrix products apply
(``n`` and ``4n`` whole vectors of the host) and a batch that fills one register tile of
rows and part of the next: flex's whole-sequence native loop
(``ember.backend.flex.native_sequence``) and ``ember.compile``'s library steps, values
and gradients against torch's autograd of the same loop, each with and without a
gradient reaching the outputs ``y``."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import Device, Tensor
from ember.backend.flex import native, native_sequence
from ember.tensor.rnn_sequence import gru_sequence, lstm_sequence
from tests.conftest import assert_close

S, B, H = 7, 10, 16


def _inputs(rng, kind, hidden=H):
    gates, H = (4 if kind == "lstm" else 3), hidden
    arrays = [
        rng.standard_normal((S, B, gates * H)).astype(np.float32),
        (rng.standard_normal((H, gates * H)) * 0.3).astype(np.float32),
    ]
    if kind == "gru":
        arrays.append(rng.standard_normal(gates * H).astype(np.float32))
    arrays.append(rng.standard_normal((B, H)).astype(np.float32))
    if kind == "lstm":
        arrays.append(rng.standard_normal((B, H)).astype(np.float32))
    return arrays


def _torch_outputs(torch, kind, tensors, reverse):
    H = tensors[1].shape[0]
    order = range(S - 1, -1, -1) if reverse else range(S)
    if kind == "lstm":
        proj, w, h, c = tensors
    else:
        proj, w, b_hh, h = tensors
    ys = [None] * S
    for t in order:
        if kind == "lstm":
            z = proj[t] + h @ w
            i, f, g, o = (z[:, k * H : (k + 1) * H] for k in range(4))
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        else:
            hp = h @ w + b_hh
            r = torch.sigmoid(proj[t][:, :H] + hp[:, :H])
            zg = torch.sigmoid(proj[t][:, H : 2 * H] + hp[:, H : 2 * H])
            n = torch.tanh(proj[t][:, 2 * H :] + r * hp[:, 2 * H :])
            h = n + zg * (h - n)
        ys[t] = h
    return [torch.stack(ys), h] + ([c] if kind == "lstm" else [])


def _loss(outs, weights, through_y):
    """The weighted sum of the outputs (``y`` left out unless ``through_y``): torch
    tensors or ember tensors alike."""
    terms = [(o * w).sum() for o, w in zip(outs, weights)][0 if through_y else 1 :]
    return sum(terms[1:], terms[0])


def _check_against_torch(torch, kind, arrays, reverse, through_y, ours):
    t_in = [torch.from_numpy(a).requires_grad_() for a in arrays]
    outs = _torch_outputs(torch, kind, t_in, reverse)
    weights = [torch.from_numpy(w) for w in _weights(kind, arrays[1].shape[0])]
    _loss(outs, weights, through_y).backward()
    expected = [o.detach().numpy() for o in outs] + [t.grad.numpy() for t in t_in]
    assert len(ours) == len(expected)
    for got, ref in zip(ours, expected):
        assert_close(got, ref, rtol=1e-4, atol=1e-5)


def _weights(kind, hidden=H):
    H = hidden
    rng = np.random.default_rng(5)
    shapes = [(S, B, H), (B, H)] + ([(B, H)] if kind == "lstm" else [])
    return [rng.uniform(0.5, 1.5, s).astype(np.float32) for s in shapes]


def _step(kind, reverse, through_y, device, hidden=H):
    weights = [Tensor.from_data(w, device=device) for w in _weights(kind, hidden)]

    def step(*ts):
        ts = [t.require_grad() for t in ts]
        outs = lstm_sequence(*ts, None, reverse) if kind == "lstm" else gru_sequence(*ts, None, reverse)
        terms = [o.mul(w).sum() for o, w in zip(outs, weights)][0 if through_y else 1 :]
        grads = sum(terms[1:], terms[0]).backward()
        return (*outs, *(t.grad(grads) for t in ts))

    return step


@pytest.mark.torch
@pytest.mark.parametrize("through_y", [True, False], ids=["y", "states"])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_flex_native_loop_against_torch(rng, torch, reverse, through_y, monkeypatch):
    if native.kernels() is None:
        pytest.skip("native kernels are unavailable on this machine")
    monkeypatch.setattr(native, "MIN_ELEMENTS", 0)
    calls = []
    for name in ("lstm_forward", "lstm_backward"):
        real = getattr(native_sequence, name)

        def spy(*args, real=real, name=name):
            result = real(*args)
            calls.append((name, result is not None))
            return result

        monkeypatch.setattr(native_sequence, name, spy)
    arrays = _inputs(rng, "lstm")
    device = Device.flex().autodiff()
    outs = _step("lstm", reverse, through_y, device)(*(Tensor.from_data(a, device=device) for a in arrays))
    assert sorted(set(calls)) == [("lstm_backward", True), ("lstm_forward", True)]  # the whole-loop path ran
    _check_against_torch(torch, "lstm", arrays, reverse, through_y, [o.to_numpy() for o in outs])


@pytest.mark.torch
@pytest.mark.parametrize("through_y", [True, False], ids=["y", "states"])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("hidden", [H, 2 * H])  # 2H: the backward's packed w_hh^T on AVX-512 too
def test_compiled_library_steps_against_torch(rng, torch, kind, reverse, through_y, hidden):
    arrays = _inputs(rng, kind, hidden)
    device = Device.flex().autodiff()
    args = [Tensor.from_data(a, device=device) for a in arrays]
    compiled = ember.compile(_step(kind, reverse, through_y, device, hidden))
    compiled(*args)  # the first call replays; the plan compiles for the next
    outs = compiled(*args)
    _check_against_torch(torch, kind, arrays, reverse, through_y, [o.to_numpy() for o in outs])
