"""Lstm, Gru and Rnn against torch.nn.LSTM / GRU / RNN: the same weights (PyTorch's
state dict loaded through ember's PyTorch adapter), outputs, final states and the
gradients of the input, the initial states and every parameter, on every autodiff
device; stacked, bidirectional, batch first or not, and with per-sequence lengths
(against PyTorch's packed sequences)."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Param, Tensor
from ember.module.foreign import export_arrays, load_foreign
from ember.nn import Gru, GruCell, GruConfig, Lstm, LstmCell, LstmConfig, LstmState, RnnCell, RnnConfig
from tests.conftest import DEVICE_NAMES, assert_close, import_torch, make_device
from tests.nn.parity import rand, to_torch

pytestmark = pytest.mark.torch

AUTODIFF = [name for name in DEVICE_NAMES if name.endswith("autodiff")]
PLAIN = [name for name in DEVICE_NAMES if not name.endswith("autodiff") and name != "cuda"]
CONFIGS = {"lstm": LstmConfig, "gru": GruConfig, "rnn_tanh": RnnConfig, "rnn_relu": RnnConfig}


def torch_twin(torch, kind, d_in, size, **kwargs):
    torch.manual_seed(0)
    if kind == "lstm":
        return torch.nn.LSTM(d_in, size, **kwargs)
    if kind == "gru":
        return torch.nn.GRU(d_in, size, **kwargs)
    return torch.nn.RNN(d_in, size, nonlinearity=kind[4:], **kwargs)


def state_dict(t_module) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in t_module.state_dict().items()}


def ember_twin(kind, d_in, size, t_module, device, **kwargs):
    """The ember layer of ``kind`` holding ``t_module``'s weights (through the adapter)."""
    extra = {"nonlinearity": kind[4:]} if kind.startswith("rnn") else {}
    module = CONFIGS[kind](d_in, size, **kwargs, **extra).init(device)
    return load_foreign(module, state_dict(t_module), source="torch", op="test")[0]


def torch_run(torch, t_module, x, lengths, states, batch_first):
    """PyTorch's outputs (through packed sequences when ``lengths``) and final states."""
    inp = x
    if lengths is not None:
        inp = torch.nn.utils.rnn.pack_padded_sequence(
            x, torch.tensor(lengths), batch_first=batch_first, enforce_sorted=False
        )
    out, final = t_module(inp, states)
    if lengths is not None:
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(
            out, batch_first=batch_first, total_length=x.shape[1 if batch_first else 0]
        )
    return out, final if isinstance(final, tuple) else (final,)


def param_grads(module, grads) -> dict[str, np.ndarray]:
    """Every parameter's gradient, under PyTorch's keys and layouts (the exporter's
    inverse of the loading adapter)."""
    as_grads = module.map_params(lambda p, path: Param.from_tensor(p.val().grad(grads)))
    return export_arrays(as_grads)


CASES = {
    # kind, num_layers, bidirectional, batch_first, initial state, lengths, bias (seq 5)
    "lstm-1": ("lstm", 1, False, True, False, None, True),
    "lstm-2-bi-lengths-state": ("lstm", 2, True, False, True, [5, 2, 4], True),
    "lstm-2-lengths-state": ("lstm", 2, False, True, True, [3, 5, 1], True),
    "lstm-bi-nobias": ("lstm", 1, True, True, True, None, False),
    "gru-2-bi-lengths-state": ("gru", 2, True, True, True, [5, 2, 4], True),
    "gru-1-state": ("gru", 1, False, False, True, None, True),
    "rnn_tanh-2-bi-lengths": ("rnn_tanh", 2, True, False, True, [2, 5, 3], True),
    "rnn_relu-bi-lengths": ("rnn_relu", 1, True, True, False, [4, 5, 1], True),
}
# The fusion devices compile each new graph (the whole unrolled sequence) once: shorter
# sequences (3 steps) keep that to seconds.
FUSION_CASES = {
    "lstm-bi-lengths-state": ("lstm", 1, True, False, True, [3, 1, 2], True),
    "gru-2-lengths-state": ("gru", 2, False, True, True, [2, 3, 1], True),
    "rnn_relu-bi": ("rnn_relu", 1, True, True, False, None, True),
}


def _run_case(case, device, rng, grads, seq=5):
    torch = import_torch()
    kind, layers, bi, batch_first, with_state, lengths, bias = CASES[case] if seq == 5 else FUSION_CASES[case]
    d_in, size, batch = 3, 4, 3
    cfg = dict(num_layers=layers, bidirectional=bi, batch_first=batch_first, bias=bias)
    t_module = torch_twin(torch, kind, d_in, size, **cfg)
    module = ember_twin(kind, d_in, size, t_module, device, **cfg)
    x = rand(rng, batch, seq, d_in) if batch_first else rand(rng, seq, batch, d_in)
    n_states = 2 if kind == "lstm" else 1
    states = [rand(rng, layers * (2 if bi else 1), batch, size) for _ in range(n_states)] if with_state else []
    tx, t_states = to_torch(x, grads), [to_torch(s, grads) for s in states]
    t_given = None if not with_state else (tuple(t_states) if kind == "lstm" else t_states[0])
    ref, t_final = torch_run(torch, t_module, tx, lengths, t_given, batch_first)

    def leaf(a):
        t = Tensor.from_data(a, device=device)
        return t.require_grad() if grads else t

    ex, e_states = leaf(x), [leaf(s) for s in states]
    given = None if not with_state else (tuple(e_states) if kind == "lstm" else e_states[0])
    out, final = module(ex, given, lengths=lengths)
    final = (final.hidden, final.cell) if kind == "lstm" else (final,)
    assert_close(out, ref.detach().numpy(), rtol=1e-4, atol=1e-5)
    for ours, theirs in zip(final, t_final):
        assert ours.dims() == list(theirs.shape)
        assert_close(ours, theirs.detach().numpy(), rtol=1e-4, atol=1e-5)
    if lengths is not None:  # padded steps output zeros
        steps = out.to_numpy() if batch_first else out.to_numpy().swapaxes(0, 1)
        for b, n in enumerate(lengths):
            assert not steps[b, n:].any()
    if not grads:
        return
    weights = [
        np.random.default_rng(i).uniform(0.5, 1.5, size=tuple(t.shape)).astype(np.float32)
        for i, t in enumerate((ref, *t_final))
    ]
    loss = sum(
        (o.mul(Tensor.from_data(w, device=device)).sum() for o, w in zip((out, *final), weights)),
        Tensor.zeros([], device=device),
    )
    e_grads = loss.backward()
    sum((o * torch.from_numpy(w)).sum() for o, w in zip((ref, *t_final), weights)).backward()
    assert_close(ex.grad(e_grads), tx.grad.numpy(), rtol=1e-3, atol=1e-4)
    for ours, theirs in zip(e_states, t_states):
        assert_close(ours.grad(e_grads), theirs.grad.numpy(), rtol=1e-3, atol=1e-4)
    ours = param_grads(module, e_grads)
    assert sorted(ours) == sorted(name for name, _ in t_module.named_parameters())
    for name, p in t_module.named_parameters():
        assert_close(ours[name], p.grad.numpy(), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("device_name", [n for n in AUTODIFF if "fusion" not in n])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_torch_with_gradients(case, device_name, rng):
    _run_case(case, make_device(device_name), rng, grads=True)


@pytest.mark.slow
@pytest.mark.parametrize("device_name", [n for n in AUTODIFF if "fusion" in n])
@pytest.mark.parametrize("case", sorted(FUSION_CASES))
def test_fusion_matches_torch_with_gradients(case, device_name, rng):
    _run_case(case, make_device(device_name), rng, grads=True, seq=3)


@pytest.mark.parametrize("device_name", PLAIN)
@pytest.mark.parametrize("case", ["lstm-bi-lengths-state", "gru-2-lengths-state"])
def test_matches_torch_without_autodiff(case, device_name, rng):
    _run_case(case, make_device(device_name), rng, grads=False, seq=3)


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_tanh"])
def test_cells_match_torch_cells(kind, rng):
    torch = import_torch()
    torch.manual_seed(3)
    d_in, size, batch = 3, 4, 2
    t_cell = {"lstm": torch.nn.LSTMCell, "gru": torch.nn.GRUCell, "rnn_tanh": torch.nn.RNNCell}[kind](d_in, size)
    cls = {"lstm": LstmCell, "gru": GruCell, "rnn_tanh": RnnCell}[kind]
    ad = Device.flex().autodiff()
    template = CONFIGS[kind](d_in, size).init(ad).cells[0]
    assert isinstance(template, cls)
    cell = load_foreign(template, state_dict(t_cell), source="torch", op="test")[0]
    x, h = rand(rng, batch, d_in), rand(rng, batch, size)
    tx, th = to_torch(x, True), to_torch(h, True)
    ex, eh = Tensor.from_data(x, device=ad).require_grad(), Tensor.from_data(h, device=ad).require_grad()
    if kind == "lstm":
        c = rand(rng, batch, size)
        t_h, _ = t_cell(tx, (th, to_torch(c)))
        out = cell(ex, (eh, Tensor.from_data(c, device=ad))).hidden
    else:
        t_h, out = t_cell(tx, th), cell(ex, eh)
    assert_close(out, t_h.detach().numpy(), rtol=1e-4, atol=1e-5)
    e_grads = out.sum().backward()
    t_h.sum().backward()
    assert_close(ex.grad(e_grads), tx.grad.numpy(), rtol=1e-3, atol=1e-5)
    ours = param_grads(cell, e_grads)
    for name, p in t_cell.named_parameters():
        assert_close(ours[name], p.grad.numpy(), rtol=1e-3, atol=1e-5)


def test_burn_style_two_d_state_and_torch_unpacking(rng):
    torch = import_torch()
    t_lstm = torch_twin(torch, "lstm", 3, 4, batch_first=True)
    lstm = ember_twin("lstm", 3, 4, t_lstm, Device.flex())
    x, h0, c0 = rand(rng, 2, 5, 3), rand(rng, 2, 4), rand(rng, 2, 4)
    ref, (t_h, t_c) = t_lstm(to_torch(x), (to_torch(h0)[None], to_torch(c0)[None]))
    out, state = lstm(Tensor.from_data(x), LstmState(cell=Tensor.from_data(c0), hidden=Tensor.from_data(h0)))
    assert state.hidden.dims() == [2, 4]  # given 2-D (Burn's Lstm), returned 2-D
    h, c = state  # PyTorch's order
    assert_close(out, ref.detach().numpy(), rtol=1e-4, atol=1e-5)
    assert_close(h, t_h[0].detach().numpy(), rtol=1e-4, atol=1e-5)
    assert_close(c, t_c[0].detach().numpy(), rtol=1e-4, atol=1e-5)
    out3, (h3, _) = lstm(Tensor.from_data(x), (Tensor.from_data(h0[None]), Tensor.from_data(c0[None])))
    assert h3.dims() == [1, 2, 4]
    assert_close(out3, out.to_numpy())


def test_lengths_as_int_tensor_and_full_lengths(rng):
    gru = GruConfig(3, 4, bidirectional=True).init(Device.flex())
    x = Tensor.from_data(rand(rng, 3, 6, 3))
    a, ha = gru(x, lengths=Tensor.from_data(np.array([6, 2, 4])))
    b, hb = gru(x, lengths=[6, 2, 4])
    assert_close(a, b.to_numpy())
    assert_close(ha, hb.to_numpy())
    full, h_full = gru(x, lengths=[6, 6, 6])
    plain, h_plain = gru(x)
    assert_close(full, plain.to_numpy())
    assert_close(h_full, h_plain.to_numpy())


def test_dropout_between_layers_only_while_training(rng):
    torch = import_torch()
    cfg = dict(num_layers=2, batch_first=True)
    t_lstm = torch_twin(torch, "lstm", 3, 4, dropout=0.5, **cfg).eval()
    x = rand(rng, 2, 5, 3)
    ref, _ = t_lstm(to_torch(x))
    plain = ember_twin("lstm", 3, 4, t_lstm, Device.flex(), dropout=0.5, **cfg)
    assert_close(plain(Tensor.from_data(x))[0], ref.detach().numpy(), rtol=1e-4, atol=1e-5)  # eval: no dropout
    ad = Device.flex().autodiff()
    trained = plain.to_device(ad)
    assert_close(trained.valid()(Tensor.from_data(x))[0], ref.detach().numpy(), rtol=1e-4, atol=1e-5)
    ad.seed(7)
    first = trained(Tensor.from_data(x, device=ad))[0].to_numpy()
    ad.seed(7)
    again = trained(Tensor.from_data(x, device=ad))[0].to_numpy()
    np.testing.assert_array_equal(first, again)  # drawn from the device's generator
    assert not np.allclose(first, ref.detach().numpy(), atol=1e-3)
    # dropout 1 zeroes the second layer's input: its output is that layer alone on zeros.
    dropped = trained.replace(dropout=1.0)
    top = Lstm(cells=[trained.cells[1]], num_layers=1, batch_first=True)
    expected = top(Tensor.zeros([2, 5, 4], device=ad))[0].to_numpy()
    assert_close(dropped(Tensor.from_data(x, device=ad))[0], expected, rtol=1e-5, atol=1e-6)


def test_gru_reset_before_the_hidden_product(rng):
    gru = GruConfig(3, 4, reset_after=False).init(Device.flex())
    x = rand(rng, 2, 3, 3)
    out, h_n = gru(Tensor.from_data(x))
    cell = gru.cells[0]
    # One step by hand: n = tanh(x W_n + b_n + (r * h) U_n + c_n).
    h = np.zeros((2, 4), np.float32)

    def lin(layer, v):
        return v @ layer.weight.val().to_numpy() + layer.bias.val().to_numpy()

    def sig(v):
        return 1 / (1 + np.exp(-v))

    for t in range(3):
        z = sig(lin(cell.update_gate.input_transform, x[:, t]) + lin(cell.update_gate.hidden_transform, h))
        r = sig(lin(cell.reset_gate.input_transform, x[:, t]) + lin(cell.reset_gate.hidden_transform, h))
        n = np.tanh(lin(cell.new_gate.input_transform, x[:, t]) + lin(cell.new_gate.hidden_transform, r * h))
        h = (1 - z) * n + z * h
        np.testing.assert_allclose(out.to_numpy()[:, t], h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h_n.to_numpy()[0], h, rtol=1e-5, atol=1e-6)
    assert isinstance(gru, Gru) and not gru.reset_after


def test_load_pytorch_file_and_export_round_trip(tmp_path, rng):
    """A torch model holding an nn.LSTM (2 layers, bidirectional) and a Linear head loads
    through ``load_pytorch`` into the same ember model, and exports back to the same keys."""
    torch = import_torch()
    from ember import Module
    from ember.nn import Linear, LinearConfig

    class TorchNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True)
            self.head = torch.nn.Linear(8, 2)

        def forward(self, x):
            return self.head(self.rnn(x)[0])

    class Net(Module):
        rnn: Lstm
        head: Linear

        def forward(self, x):
            return self.head(self.rnn(x)[0])

    torch.manual_seed(5)
    t_net = TorchNet()
    path = tmp_path / "net.pt"
    torch.save(t_net.state_dict(), path)
    net = Net(rnn=LstmConfig(3, 4, num_layers=2, bidirectional=True).init(), head=LinearConfig(8, 2).init())
    net = net.load_pytorch(path)
    x = rand(rng, 2, 5, 3)
    assert_close(net(Tensor.from_data(x)), t_net(to_torch(x)).detach().numpy(), rtol=1e-4, atol=1e-5)
    exported = export_arrays(net)
    assert sorted(exported) == sorted(t_net.state_dict())
    for key, value in t_net.state_dict().items():
        np.testing.assert_array_equal(exported[key], value.numpy())


def test_load_errors_name_the_key():
    torch = import_torch()
    from ember.errors import RecordError

    gru_weights = state_dict(torch.nn.GRU(3, 4))
    with pytest.raises(RecordError, match=r"'weight_ih_l0' has shape \[5, 3\].*multiple of 4"):
        load_foreign(LstmConfig(3, 5).init(), state_dict(torch.nn.RNN(3, 5)), source="rnn.pt", op="load_pytorch")
    with pytest.raises(RecordError, match=r"has shape \[3, 3\] in the record \(gru.pt\) but \[3, 5\]"):
        load_foreign(LstmConfig(3, 5).init(), gru_weights, source="gru.pt", op="load_pytorch")
    with pytest.raises(RecordError, match="weight_ih_l1"):  # a one-layer checkpoint into two layers
        load_foreign(GruConfig(3, 4, num_layers=2).init(), gru_weights, source="gru.pt", op="load_pytorch")


def test_errors_name_what_to_pass():
    from ember.errors import ConfigError, DTypeError, ShapeError, ValueRangeError

    lstm = LstmConfig(3, 4, num_layers=2, bidirectional=True).init()
    x = Tensor.zeros([2, 5, 3])
    with pytest.raises(ShapeError, match=r"\[batch, seq, d_input\] with d_input=3, got \[2, 5, 4\]"):
        lstm(Tensor.zeros([2, 5, 4]))
    with pytest.raises(ShapeError, match=r"one step of a cell takes \[batch, d_input\]"):
        lstm(Tensor.zeros([2, 3]))
    with pytest.raises(ShapeError, match=r"\[seq, batch, d_input\]"):
        GruConfig(3, 4, batch_first=False).init()(Tensor.zeros([5, 2]))
    with pytest.raises(
        ShapeError, match=r"h0 must be \[num_layers \* num_directions=4, batch=2, d_hidden=4\], got \[2, 2, 4\]"
    ):
        lstm(x, (Tensor.zeros([2, 2, 4]), Tensor.zeros([4, 2, 4])))
    with pytest.raises(ShapeError, match=r"c0 must be \[num_layers \* num_directions=4"):
        lstm(x, (Tensor.zeros([4, 2, 4]), Tensor.zeros([2, 4])))
    with pytest.raises(ShapeError, match="h0 must be"):  # 2-D only for one layer and direction
        GruConfig(3, 4, num_layers=2).init()(x, Tensor.zeros([2, 4]))
    with pytest.raises(ValueRangeError, match=r"every length must lie in \[1, seq=5\], got \[6, 2\]"):
        lstm(x, lengths=[6, 2])
    with pytest.raises(ValueRangeError, match=r"\[1, seq=5\], got \[0, 2\]"):
        lstm(x, lengths=Tensor.from_data(np.array([0, 2])))
    with pytest.raises(ShapeError, match=r"one length per batch element \(\[2\]\), got shape \[3\]"):
        lstm(x, lengths=[5, 2, 1])
    with pytest.raises(DTypeError, match="lengths must be integers"):
        lstm(x, lengths=[2.5, 1])
    with pytest.raises(ShapeError, match="no steps"):
        lstm(Tensor.zeros([2, 0, 3]))
    with pytest.raises(ShapeError, match=r"LstmCell: one step's input must be \[batch, d_input=3\]"):
        lstm.cells[0](x)
    with pytest.raises(ShapeError, match=r"GruCell: the state must be \[batch=2, d_hidden=4\]"):
        GruConfig(3, 4).init().cells[0](Tensor.zeros([2, 3]), Tensor.zeros([2, 5]))
    with pytest.raises(ConfigError, match="must be > 0"):
        LstmConfig(0, 4)
    with pytest.raises(ConfigError, match="num_layers must be an int >= 1"):
        GruConfig(3, 4, num_layers=0)
    with pytest.raises(ConfigError, match=r"dropout must lie in \[0, 1\]"):
        LstmConfig(3, 4, dropout=1.5)
    with pytest.raises(ConfigError, match="nonlinearity must be 'tanh' or 'relu'"):
        RnnConfig(3, 4, nonlinearity="sigmoid")
    with pytest.raises(ConfigError, match="3 cells for num_layers=2"):
        Lstm(cells=lstm.cells[:3], num_layers=2, bidirectional=True)(x)


def test_configs_and_parameter_counts():
    assert LstmConfig(3, 4, bias=False).init().num_params() == 4 * (3 * 4 + 4 * 4)
    assert GruConfig(3, 4).init().num_params() == 3 * (3 * 4 + 4 + 4 * 4 + 4)
    # Layers above the first read both directions' features, as PyTorch's.
    torch = import_torch()
    ours = RnnConfig(3, 4, num_layers=3, bidirectional=True).init().num_params()
    assert ours == sum(p.numel() for p in torch.nn.RNN(3, 4, num_layers=3, bidirectional=True).parameters())
    from ember.nn import BiLstm, BiLstmConfig

    bi = BiLstmConfig(3, 4).init()
    assert isinstance(bi, BiLstm) and bi.bidirectional and len(bi.cells) == 2
    out, state = bi(Tensor.zeros([2, 5, 3]))
    assert out.dims() == [2, 5, 8] and state.hidden.dims() == [2, 2, 4]


def _np_direction(kind, x, w_ih, w_hh, b, h, c, lengths, reverse, clip, acts):
    """float64 numpy oracle of one direction, time-first, ONNX's equations (gates in
    PyTorch's order; each sequence reversed within its length)."""
    seq, batch, _ = x.shape
    size = w_hh.shape[0]
    y = np.zeros((seq, batch, size))
    f, g, hh = acts
    for n in range(batch):
        hn, cn = h[n].copy(), c[n].copy()
        steps = range(lengths[n])
        for t in reversed(steps) if reverse else steps:
            if kind == "lstm":
                z = np.clip(x[t, n] @ w_ih + b + hn @ w_hh, -clip, clip)
                i, fo, gg, o = np.split(z, 4)
                cn = f(fo) * cn + f(i) * g(gg)
                hn = f(o) * hh(cn)
            else:  # gru, reset applied before the hidden product (ONNX's default)
                xp = x[t, n] @ w_ih + b[: 3 * size]
                r = f(np.clip(xp[:size] + hn @ w_hh[:, :size] + b[3 * size : 4 * size], -clip, clip))
                z = f(
                    np.clip(xp[size : 2 * size] + hn @ w_hh[:, size : 2 * size] + b[4 * size : 5 * size], -clip, clip)
                )
                nn_ = g(np.clip(xp[2 * size :] + (r * hn) @ w_hh[:, 2 * size :] + b[5 * size :], -clip, clip))
                hn = (1 - z) * nn_ + z * hn
            y[t, n] = hn
        h[n], c[n] = hn, cn
    return y, h, c


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_direction_functions_with_clip_activations_and_lengths(kind, rng):
    """The per-direction entry points (for importers) against a float64 oracle of ONNX's
    equations: custom activations, clip, lengths and reverse."""
    from ember.nn.rnn import gru_direction, lstm_direction
    from ember.tensor import activation as F

    seq, batch, d_in, size = 4, 3, 2, 3
    gates = 4 if kind == "lstm" else 3
    x = rand(rng, seq, batch, d_in)
    w_ih, w_hh = rand(rng, d_in, gates * size), rand(rng, size, gates * size)
    b_ih, b_hh = rand(rng, gates * size), rand(rng, gates * size)
    h0, c0 = rand(rng, batch, size), rand(rng, batch, size)
    lengths, clip = [4, 1, 3], 1.5

    def sig(v):
        return 1 / (1 + np.exp(-v))

    if kind == "lstm":
        acts = (sig, lambda v: np.maximum(v, 0), np.tanh)
        b = b_ih + b_hh
        y, h, c = lstm_direction(
            *(Tensor.from_data(a) for a in (x, w_ih, w_hh, b_ih, b_hh, h0, c0)),
            lengths=lengths,
            reverse=True,
            clip=clip,
            activations=(F.sigmoid, F.relu, F.tanh),
        )
    else:
        acts = (sig, np.tanh, None)
        b = np.concatenate([b_ih, b_hh])
        y, h = gru_direction(
            *(Tensor.from_data(a) for a in (x, w_ih, w_hh, b_ih, b_hh, h0)),
            lengths=lengths,
            reverse=True,
            reset_after=False,
            clip=clip,
        )
    f64 = [a.astype(np.float64) for a in (x, w_ih, w_hh, b, h0, c0)]
    ry, rh, rc = _np_direction(kind, *f64, lengths, True, clip, acts)
    assert_close(y, ry, rtol=1e-4, atol=1e-5)
    assert_close(h, rh, rtol=1e-4, atol=1e-5)
    if kind == "lstm":
        assert_close(c, rc, rtol=1e-4, atol=1e-5)


def test_rnn_direction_matches_the_layer(rng):
    """``rnn_direction`` over a layer's fused weights is that layer (batch first)."""
    from ember.nn.rnn import rnn_direction

    layer = RnnConfig(3, 4, nonlinearity="relu").init(Device.flex())
    x = Tensor.from_data(rand(rng, 2, 5, 3))
    out, h_n = layer(x, lengths=[5, 2])
    y, h = rnn_direction(x, *layer.cells[0].weights(), lengths=[5, 2], batch_first=True, nonlinearity="relu")
    assert_close(y, out.to_numpy())
    assert_close(h, h_n.to_numpy()[0])
    from ember.errors import ShapeError

    with pytest.raises(ShapeError, match=r"w_ih must be \[d_input=3, 1 \* d_hidden=4\]"):
        rnn_direction(x, layer.cells[0].weights()[1], layer.cells[0].weights()[1], batch_first=True)


def test_record_round_trip(tmp_path, rng):
    gru = GruConfig(3, 4, num_layers=2, bidirectional=True, batch_first=False).init(Device.flex())
    gru.save_file(tmp_path / "gru.safetensors")
    fresh = GruConfig(3, 4, num_layers=2, bidirectional=True, batch_first=False).init(Device.flex())
    loaded = fresh.load_file(tmp_path / "gru.safetensors")
    x = Tensor.from_data(rand(rng, 5, 2, 3))
    (a, ha), (b, hb) = gru(x, lengths=[5, 2]), loaded(x, lengths=[5, 2])
    assert_close(a, b.to_numpy())
    assert_close(ha, hb.to_numpy())
    assert [path for path, _ in loaded.named_params()][:2] == [
        "cells.0.reset_gate.input_transform.weight",
        "cells.0.reset_gate.input_transform.bias",
    ]
