"""LSTM, GRU and RNN operators: torch's exports (nn.LSTM/GRU/RNN, multi-layer and
bidirectional, with initial states) and hand-built nodes with every attribute
(direction, layout, activations with alpha/beta, clip, sequence_lens, linear_before_reset),
against onnxruntime; gradients of the imported weights against torch."""

from __future__ import annotations

import numpy as np
import pytest

import ember.onnx
from ember import Device, Tensor
from ember.errors import OnnxError
from tests.conftest import import_torch
from tests.onnx_import.helpers import export, import_onnx, onnx_model, run_ort

SEQ, BATCH, D_IN, HIDDEN = 5, 3, 4, 6


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_torch_exports_match_torch_and_onnxruntime(rng, kind, bidirectional):
    torch = import_torch()
    ort = import_onnx("onnxruntime")
    torch.manual_seed(0)
    layers = 2
    cls = getattr(torch.nn, kind)
    net = cls(D_IN, HIDDEN, num_layers=layers, bidirectional=bidirectional)
    dirs = 2 if bidirectional else 1
    x = rng.standard_normal((SEQ, BATCH, D_IN)).astype(np.float32)
    h0 = rng.standard_normal((layers * dirs, BATCH, HIDDEN)).astype(np.float32)

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x, h0):
            if kind == "LSTM":
                y, (h, c) = self.net(x, (h0, torch.zeros_like(h0)))
                return y, h, c
            y, h = self.net(x, h0)
            return y, h

    wrap = Wrap().eval()
    outputs = ["y", "h", "c"] if kind == "LSTM" else ["y", "h"]
    data = export(torch, wrap, (torch.as_tensor(x), torch.as_tensor(h0)), output_names=outputs)
    with torch.no_grad():
        expected = [t.numpy() for t in wrap(torch.as_tensor(x), torch.as_tensor(h0))]
    model = ember.onnx.load(data)
    ours = model(Tensor.from_data(x), Tensor.from_data(h0))
    ours = ours if isinstance(ours, (tuple, list)) else [ours]
    for got, want, oracle in zip(ours, expected, run_ort(ort, data, x, h0)):
        np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got.to_numpy(), oracle, rtol=1e-4, atol=1e-5)


def test_imported_lstm_weights_train_and_their_gradients_match_torch(rng):
    torch = import_torch()
    torch.manual_seed(1)
    net = torch.nn.LSTM(D_IN, HIDDEN, bidirectional=True).eval()
    x = rng.standard_normal((SEQ, BATCH, D_IN)).astype(np.float32)

    class Last(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x):
            return self.net(x)[0]

    data = export(torch, Last(), (torch.as_tensor(x),))
    device = Device.flex().autodiff()
    model = ember.onnx.load(data, device=device)
    assert len(model.describe_params().trainable) == 3  # W, R and B
    y = model(Tensor.from_data(x, device=device))
    grads = y.mul(y).sum().backward()
    out = net(torch.as_tensor(x))[0]
    (out * out).sum().backward()

    def onnx_order(name):  # torch's i, f, g, o blocks -> ONNX's i, o, f, c; directions stacked
        blocks = [getattr(net, name + sfx).grad.numpy() for sfx in ("", "_reverse")]
        return np.stack([np.concatenate([np.split(g, 4)[k] for k in (0, 3, 1, 2)]) for g in blocks])

    expected = {
        (2, 4 * HIDDEN, D_IN): onnx_order("weight_ih_l0"),
        (2, 4 * HIDDEN, HIDDEN): onnx_order("weight_hh_l0"),
        (2, 8 * HIDDEN): np.concatenate([onnx_order("bias_ih_l0"), onnx_order("bias_hh_l0")], axis=1),
    }
    seen = 0
    for _, param in model.named_params():
        if param.require_grad:
            got = param.val().grad(grads).to_numpy()
            np.testing.assert_allclose(got, expected[got.shape], rtol=1e-4, atol=1e-4)
            seen += 1
    assert seen == 3


def node_model(onnx, op, attrs, x, w, r, b=None, seq_lens=None, h0=None, c0=None, n_out=2, p=None):
    helper, TP = onnx.helper, onnx.TensorProto
    names, inputs, feeds = [], [], []

    def add(name, array, elem=TP.FLOAT):
        if array is None:
            names.append("")
            return
        names.append(name)
        inputs.append((name, elem, list(array.shape)))
        feeds.append(array)

    add("X", x)
    add("W", w)
    add("R", r)
    add("B", b)
    add("L", seq_lens, TP.INT32)
    add("H", h0)
    if op == "LSTM":
        add("C", c0)
        add("P", p)
    while names and names[-1] == "":
        names.pop()
    outs = ["Y", "Y_h", "Y_c"][:n_out]
    node = helper.make_node(op, names, outs, **attrs)
    data = onnx_model(onnx, [node], inputs, [(o, TP.FLOAT, None) for o in outs], opset=14)
    return data, feeds


CASES = [
    ("LSTM", dict(direction="bidirectional", clip=1.5), 3),
    ("LSTM", dict(direction="reverse", activations=["HardSigmoid", "LeakyRelu", "ScaledTanh"],
                  activation_alpha=[0.3, 0.2, 1.5], activation_beta=[0.4, 0.7]), 3),
    ("LSTM", dict(layout=1), 3),
    ("GRU", dict(direction="bidirectional"), 2),
    ("GRU", dict(linear_before_reset=1, activations=["Sigmoid", "Softsign"]), 2),
    ("GRU", dict(direction="reverse", layout=1, clip=0.8), 2),
    ("RNN", dict(activations=["Relu"]), 2),
    ("RNN", dict(direction="bidirectional", activations=["Tanh", "Affine"], activation_alpha=[0.5],
                 activation_beta=[0.1]), 2),
]  # fmt: skip


@pytest.mark.parametrize("op,attrs,n_out", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
@pytest.mark.parametrize("lengths", [False, True], ids=["full", "lengths"])
def test_hand_built_nodes_match_onnxruntime(rng, op, attrs, n_out, lengths):
    onnx = import_onnx()
    ort = import_onnx("onnxruntime")
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    layout = attrs.get("layout", 0)
    x = rng.standard_normal((BATCH, SEQ, D_IN) if layout else (SEQ, BATCH, D_IN)).astype(np.float32)
    w = (rng.standard_normal((dirs, gates * HIDDEN, D_IN)) * 0.5).astype(np.float32)
    r = (rng.standard_normal((dirs, gates * HIDDEN, HIDDEN)) * 0.5).astype(np.float32)
    b = (rng.standard_normal((dirs, 2 * gates * HIDDEN)) * 0.3).astype(np.float32)
    state = (BATCH, dirs, HIDDEN) if layout else (dirs, BATCH, HIDDEN)
    h0 = rng.standard_normal(state).astype(np.float32)
    c0 = rng.standard_normal(state).astype(np.float32) if op == "LSTM" else None
    seq_lens = np.array([SEQ, 2, 4], dtype=np.int32) if lengths else None
    data, feeds = node_model(onnx, op, {"hidden_size": HIDDEN, **attrs}, x, w, r, b, seq_lens, h0, c0, n_out)
    if layout:  # onnxruntime's CPU kernels refuse layout=1: its layout-0 twin on transposed inputs
        twin_attrs = {"hidden_size": HIDDEN, **{k: v for k, v in attrs.items() if k != "layout"}}
        twin, twin_feeds = node_model(
            onnx, op, twin_attrs, x.transpose(1, 0, 2), w, r, b, seq_lens,
            h0.transpose(1, 0, 2), None if c0 is None else c0.transpose(1, 0, 2), n_out,
        )  # fmt: skip
        y, *states = run_ort(ort, twin, *twin_feeds)
        expected = [y.transpose(2, 0, 1, 3)] + [st.transpose(1, 0, 2) for st in states]
    else:
        expected = run_ort(ort, data, *feeds)
    model = ember.onnx.load(data)
    ours = model(*[Tensor.from_data(f) for f in feeds])
    for got, want in zip(ours, expected):
        np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "attrs",
    [{}, {"direction": "bidirectional", "clip": 0.9}, {"direction": "reverse"}],
    ids=["forward", "bi-clip", "reverse"],
)
@pytest.mark.parametrize("lengths", [False, True], ids=["full", "lengths"])
def test_lstm_peepholes_match_onnxruntime(rng, attrs, lengths):
    onnx = import_onnx()
    ort = import_onnx("onnxruntime")
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    x = rng.standard_normal((SEQ, BATCH, D_IN)).astype(np.float32)
    w = (rng.standard_normal((dirs, 4 * HIDDEN, D_IN)) * 0.5).astype(np.float32)
    r = (rng.standard_normal((dirs, 4 * HIDDEN, HIDDEN)) * 0.5).astype(np.float32)
    b = (rng.standard_normal((dirs, 8 * HIDDEN)) * 0.3).astype(np.float32)
    h0, c0 = (rng.standard_normal((dirs, BATCH, HIDDEN)).astype(np.float32) for _ in range(2))
    p = rng.standard_normal((dirs, 3 * HIDDEN)).astype(np.float32)
    seq_lens = np.array([SEQ, 2, 4], dtype=np.int32) if lengths else None
    data, feeds = node_model(onnx, "LSTM", {"hidden_size": HIDDEN, **attrs}, x, w, r, b, seq_lens, h0, c0, 3, p)
    ours = ember.onnx.load(data)(*[Tensor.from_data(f) for f in feeds])
    for got, want in zip(ours, run_ort(ort, data, *feeds)):
        np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-4, atol=1e-5)


def test_what_the_recurrent_ops_refuse_is_named(rng):
    onnx = import_onnx()
    x = np.zeros((SEQ, BATCH, D_IN), np.float32)
    w = np.zeros((1, 4 * HIDDEN, D_IN), np.float32)
    r = np.zeros((1, 4 * HIDDEN, HIDDEN), np.float32)
    data, _ = node_model(onnx, "LSTM", {"hidden_size": HIDDEN, "input_forget": 1}, x, w, r)
    with pytest.raises(OnnxError, match="input_forget"):
        ember.onnx.load(data)
    data, _ = node_model(onnx, "LSTM", {"hidden_size": HIDDEN, "activations": ["Sigmoid", "Swish", "Tanh"]}, x, w, r)
    with pytest.raises(OnnxError, match="'Swish' is not an activation"):
        ember.onnx.load(data)
    data, feeds = node_model(onnx, "LSTM", {"hidden_size": HIDDEN + 1}, x, w, r)
    with pytest.raises(OnnxError, match="hidden_size"):
        ember.onnx.load(data)(*[Tensor.from_data(f) for f in feeds])
