"""Lstm and Gru against torch.nn.LSTM / torch.nn.GRU with the same weights (PyTorch's
stacked ``[4H, D]`` / ``[3H, D]`` gate weights mapped to ember's per-gate Linear
layers), with and without an initial state, batch first or not."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import ConfigError, ShapeError
from ember.nn import GateController, Gru, GruConfig, Lstm, LstmConfig, LstmState
from tests.conftest import assert_close, import_torch, parity_device
from tests.nn.parity import leaf, rand, to_torch, torch_linear, weighted_backward

pytestmark = pytest.mark.torch
AD = parity_device()  # flex+autodiff, or EMBER_PARITY_DEVICE (cuda+autodiff on a GPU machine)


def _gate(t_rnn, k, size, device):
    """Gate ``k`` of PyTorch's stacked weights as an ember GateController."""
    rows = slice(k * size, (k + 1) * size)

    def linear(kind):
        return torch_linear(getattr(t_rnn, f"weight_{kind}_l0")[rows], getattr(t_rnn, f"bias_{kind}_l0")[rows], device)

    return GateController(input_transform=linear("ih"), hidden_transform=linear("hh"))


def _gate_grad(gate, grads, t_rnn, k, size):
    rows = slice(k * size, (k + 1) * size)
    assert_close(
        gate.input_transform.weight.val().grad(grads), t_rnn.weight_ih_l0.grad[rows].numpy().T, rtol=1e-3, atol=1e-5
    )
    assert_close(
        gate.hidden_transform.weight.val().grad(grads), t_rnn.weight_hh_l0.grad[rows].numpy().T, rtol=1e-3, atol=1e-5
    )
    assert_close(gate.input_transform.bias.val().grad(grads), t_rnn.bias_ih_l0.grad[rows].numpy(), rtol=1e-3, atol=1e-5)
    assert_close(
        gate.hidden_transform.bias.val().grad(grads), t_rnn.bias_hh_l0.grad[rows].numpy(), rtol=1e-3, atol=1e-5
    )


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("with_state", [False, True])
def test_lstm_matches_torch(batch_first, with_state, rng):
    torch = import_torch()
    torch.manual_seed(0)
    d_in, size, batch, seq = 3, 5, 2, 4
    t_lstm = torch.nn.LSTM(d_in, size, batch_first=batch_first)
    # PyTorch's gate order is (input, forget, cell, output).
    lstm = Lstm(
        input_gate=_gate(t_lstm, 0, size, AD),
        forget_gate=_gate(t_lstm, 1, size, AD),
        cell_gate=_gate(t_lstm, 2, size, AD),
        output_gate=_gate(t_lstm, 3, size, AD),
        batch_first=batch_first,
    )
    x = rand(rng, batch, seq, d_in) if batch_first else rand(rng, seq, batch, d_in)
    h0, c0 = rand(rng, batch, size), rand(rng, batch, size)
    tx = to_torch(x, True)
    ex = leaf(x, AD)
    if with_state:
        th0, tc0 = to_torch(h0, True), to_torch(c0, True)
        ref, (t_h, t_c) = t_lstm(tx, (th0[None], tc0[None]))
        eh0, ec0 = leaf(h0, AD), leaf(c0, AD)
        out, state = lstm(ex, LstmState(cell=ec0, hidden=eh0))
    else:
        ref, (t_h, t_c) = t_lstm(tx)
        out, state = lstm(ex)
    assert_close(out, ref.detach().numpy(), rtol=1e-4, atol=1e-5)
    assert_close(state.hidden, t_h[0].detach().numpy(), rtol=1e-4, atol=1e-5)
    assert_close(state.cell, t_c[0].detach().numpy(), rtol=1e-4, atol=1e-5)
    grads = weighted_backward(out, ref)
    assert_close(ex.grad(grads), tx.grad.numpy(), rtol=1e-3, atol=1e-5)
    for k, gate in enumerate([lstm.input_gate, lstm.forget_gate, lstm.cell_gate, lstm.output_gate]):
        _gate_grad(gate, grads, t_lstm, k, size)
    if with_state:
        assert_close(eh0.grad(grads), th0.grad.numpy(), rtol=1e-3, atol=1e-5)
        assert_close(ec0.grad(grads), tc0.grad.numpy(), rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("with_state", [False, True])
def test_gru_matches_torch(batch_first, with_state, rng):
    torch = import_torch()
    torch.manual_seed(1)
    d_in, size, batch, seq = 4, 3, 2, 5
    t_gru = torch.nn.GRU(d_in, size, batch_first=batch_first)
    # PyTorch's gate order is (reset, update, new).
    gru = Gru(
        reset_gate=_gate(t_gru, 0, size, AD),
        update_gate=_gate(t_gru, 1, size, AD),
        new_gate=_gate(t_gru, 2, size, AD),
        batch_first=batch_first,
    )
    x = rand(rng, batch, seq, d_in) if batch_first else rand(rng, seq, batch, d_in)
    h0 = rand(rng, batch, size)
    tx = to_torch(x, True)
    ex = leaf(x, AD)
    if with_state:
        th0 = to_torch(h0, True)
        ref, _ = t_gru(tx, th0[None])
        eh0 = leaf(h0, AD)
        out = gru(ex, eh0)
    else:
        ref, _ = t_gru(tx)
        out = gru(ex)
    assert_close(out, ref.detach().numpy(), rtol=1e-4, atol=1e-5)
    grads = weighted_backward(out, ref)
    assert_close(ex.grad(grads), tx.grad.numpy(), rtol=1e-3, atol=1e-5)
    for k, gate in enumerate([gru.reset_gate, gru.update_gate, gru.new_gate]):
        _gate_grad(gate, grads, t_gru, k, size)
    if with_state:
        assert_close(eh0.grad(grads), th0.grad.numpy(), rtol=1e-3, atol=1e-5)


def test_gru_reset_before_the_hidden_product(rng):
    gru = GruConfig(3, 4, reset_after=False).init(Device.flex())
    x = rand(rng, 2, 3, 3)
    out = gru(Tensor.from_data(x)).to_numpy()
    # One step by hand: n = tanh(x W_n + b_n + (r * h) U_n + c_n).
    h = np.zeros((2, 4), np.float32)

    def lin(layer, v):
        return v @ layer.weight.val().to_numpy() + layer.bias.val().to_numpy()

    def sig(v):
        return 1 / (1 + np.exp(-v))

    for t in range(3):
        z = sig(lin(gru.update_gate.input_transform, x[:, t]) + lin(gru.update_gate.hidden_transform, h))
        r = sig(lin(gru.reset_gate.input_transform, x[:, t]) + lin(gru.reset_gate.hidden_transform, h))
        n = np.tanh(lin(gru.new_gate.input_transform, x[:, t]) + lin(gru.new_gate.hidden_transform, r * h))
        h = (1 - z) * n + z * h
        np.testing.assert_allclose(out[:, t], h, rtol=1e-5, atol=1e-6)


def test_rnn_configs_and_errors():
    lstm = LstmConfig(3, 4, bias=False).init()
    assert lstm.num_params() == 4 * (3 * 4 + 4 * 4)
    assert GruConfig(3, 4).init().num_params() == 3 * (3 * 4 + 4 + 4 * 4 + 4)
    with pytest.raises(ShapeError, match=r"\[batch, seq, d_input\] with d_input=3"):
        lstm(Tensor.zeros([2, 5, 4]))
    with pytest.raises(ShapeError, match=r"state must be \[batch=2, d_hidden=4\]"):
        GruConfig(3, 4).init()(Tensor.zeros([2, 5, 3]), Tensor.zeros([2, 5]))
    with pytest.raises(ConfigError, match="must be > 0"):
        LstmConfig(0, 4)
    out, state = lstm(Tensor.zeros([2, 5, 3]))
    assert out.dims() == [2, 5, 4] and state.cell.dims() == [2, 4]
