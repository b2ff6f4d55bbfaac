"""Opset 24-27's TensorScatter, CausalConvWithState, LinearAttention and BitCast: against float64 numpy
oracles written here from the spec's formulas, and streaming (a run in pieces that carries
the state equals one run over the whole sequence)."""

from __future__ import annotations

import numpy as np
import pytest

import ember.onnx
from ember import Device, Tensor
from ember.backend.dtype import DType
from ember.errors import OnnxError
from tests.onnx_import.helpers import import_onnx, onnx_model

#: these operators exist from opset 26-27, newer than the opsets ember.onnx documents (a warning)
pytestmark = pytest.mark.filterwarnings("ignore:.*newer than the opsets ember.onnx documents")


def _causal_conv_model(onnx, channels, k, activation):
    T = onnx.TensorProto
    node = onnx.helper.make_node(
        "CausalConvWithState", ["x", "w", "b", "past"], ["y", "present"], activation=activation
    )
    return onnx_model(
        onnx,
        [node],
        [
            ("x", T.FLOAT, ["B", channels, "L"]),
            ("w", T.FLOAT, [channels, 1, k]),
            ("b", T.FLOAT, [channels]),
            ("past", T.FLOAT, ["B", channels, k - 1]),
        ],
        [("y", T.FLOAT, None), ("present", T.FLOAT, None)],
        opset=27,
    )


@pytest.mark.parametrize("activation", ["none", "silu"])
def test_causal_conv_with_state_matches_numpy_and_streams(rng, activation):
    onnx = import_onnx("onnx")
    channels, k, length = 3, 4, 9
    x = rng.standard_normal((2, channels, length)).astype(np.float32)
    w = rng.standard_normal((channels, 1, k)).astype(np.float32)
    b = rng.standard_normal(channels).astype(np.float32)
    past = rng.standard_normal((2, channels, k - 1)).astype(np.float32)
    model = ember.onnx.load(_causal_conv_model(onnx, channels, k, activation))
    padded = np.concatenate([past, x], 2).astype(np.float64)
    want = np.stack([(padded[:, :, t : t + k] * w[:, 0]).sum(-1) for t in range(length)], -1) + b[:, None]
    if activation == "silu":
        want = want / (1 + np.exp(-want))
    y, present = model(*[Tensor.from_data(a) for a in (x, w, b, past)])
    np.testing.assert_allclose(y.to_numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(present.to_numpy(), padded[:, :, -(k - 1) :].astype(np.float32))
    state, pieces = Tensor.from_data(past), []
    for start, stop in ((0, 4), (4, 5), (5, 9)):  # a prefill, one decode step, the rest
        piece, state = model(Tensor.from_data(x[:, :, start:stop]), Tensor.from_data(w), Tensor.from_data(b), state)
        pieces.append(piece.to_numpy())
    np.testing.assert_allclose(np.concatenate(pieces, 2), y.to_numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(state.to_numpy(), present.to_numpy())


def _linear_attention_numpy(q, k, v, past, decay, beta, hq, hkv, rule, scale):
    """The spec's recurrence in float64, one token at a time."""
    b, t, _ = q.shape
    dk, dv = q.shape[2] // hq, v.shape[2] // hkv
    q4 = q.reshape(b, t, hq, dk).astype(np.float64)
    k4 = k.reshape(b, t, hkv, dk).astype(np.float64)
    v4 = v.reshape(b, t, hkv, dv).astype(np.float64)
    state = past.astype(np.float64).copy()
    out = np.zeros((b, t, hq, dv))
    for i in range(t):
        if rule in ("gated", "gated_delta"):
            g = np.exp(decay[:, i].reshape(b, hkv, -1).astype(np.float64))  # per head or per key dim
            state = state * g[..., None]
        vt = v4[:, i]
        if rule in ("delta", "gated_delta"):
            rate = beta[:, i].reshape(b, -1, 1).astype(np.float64)
            vt = rate * (vt - np.einsum("bhdm,bhd->bhm", state, k4[:, i]))
        state = state + k4[:, i][..., None] * vt[..., None, :]
        read = np.repeat(state, hq // hkv, axis=1)
        out[:, i] = scale * np.einsum("bhd,bhdm->bhm", q4[:, i], read)
    return out.reshape(b, t, hq * dv), state


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
def test_linear_attention_matches_the_recurrence_and_streams(rng, rule):
    onnx = import_onnx("onnx")
    T = onnx.TensorProto
    b, t, hq, hkv, dk, dv = 2, 5, 4, 2, 3, 2
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    names = ["q", "k", "v", "past", "decay" if gated else "", "beta" if delta else ""]
    while names[-1] == "":
        names.pop()
    node = onnx.helper.make_node(
        "LinearAttention", names, ["y", "present"], q_num_heads=hq, kv_num_heads=hkv, update_rule=rule, scale=0.7
    )
    inputs = [
        ("q", T.FLOAT, [b, "T", hq * dk]),
        ("k", T.FLOAT, [b, "T", hkv * dk]),
        ("v", T.FLOAT, [b, "T", hkv * dv]),
        ("past", T.FLOAT, [b, hkv, dk, dv]),
    ]
    if gated:
        inputs.append(("decay", T.FLOAT, [b, "T", hkv * dk]))
    if delta:
        inputs.append(("beta", T.FLOAT, [b, "T", hkv]))
    model = ember.onnx.load(
        onnx_model(onnx, [node], inputs, [("y", T.FLOAT, None), ("present", T.FLOAT, None)], opset=27)
    )
    q = rng.standard_normal((b, t, hq * dk)).astype(np.float32)
    k = rng.standard_normal((b, t, hkv * dk)).astype(np.float32) * 0.5
    v = rng.standard_normal((b, t, hkv * dv)).astype(np.float32)
    past = rng.standard_normal((b, hkv, dk, dv)).astype(np.float32)
    decay = -np.abs(rng.standard_normal((b, t, hkv * dk))).astype(np.float32)
    beta = rng.uniform(0, 1, (b, t, hkv)).astype(np.float32)
    extra = ([decay] if gated else []) + ([beta] if delta else [])
    want_y, want_state = _linear_attention_numpy(q, k, v, past, decay, beta, hq, hkv, rule, 0.7)
    y, state = model(*[Tensor.from_data(a) for a in (q, k, v, past, *extra)])
    np.testing.assert_allclose(y.to_numpy(), want_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(state.to_numpy(), want_state, rtol=1e-5, atol=1e-5)
    carried, pieces = Tensor.from_data(past), []
    for start, stop in ((0, 3), (3, 4), (4, 5)):  # a prefill, then decode steps
        piece, carried = model(
            *[Tensor.from_data(a[:, start:stop]) for a in (q, k, v)],
            carried,
            *[Tensor.from_data(a[:, start:stop]) for a in extra],
        )
        pieces.append(piece.to_numpy())
    np.testing.assert_allclose(np.concatenate(pieces, 1), y.to_numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(carried.to_numpy(), state.to_numpy(), rtol=1e-5, atol=1e-6)


def test_linear_attention_refuses_a_missing_decay():
    onnx = import_onnx("onnx")
    T = onnx.TensorProto
    node = onnx.helper.make_node("LinearAttention", ["q", "k", "v"], ["y", "s"], q_num_heads=1, kv_num_heads=1)
    data = onnx_model(
        onnx, [node], [(n, T.FLOAT, [1, 2, 4]) for n in "qkv"], [("y", T.FLOAT, [1, 2, 4])], opset=27, check=False
    )
    with pytest.raises(OnnxError, match="'gated_delta' needs decay"):
        ember.onnx.load(data)


@pytest.mark.parametrize(
    ("source", "target"), [("INT16", "UINT16"), ("FLOAT", "INT32"), ("INT8", "UINT8"), ("FLOAT16", "BFLOAT16")]
)
def test_bitcast_reads_the_bits_of_the_onnx_type(rng, source, target):
    onnx = import_onnx("onnx")
    T = onnx.TensorProto
    np_source = onnx.helper.tensor_dtype_to_np_dtype(getattr(T, source))
    np_target = onnx.helper.tensor_dtype_to_np_dtype(getattr(T, target))
    x = rng.integers(0, 256, (3, 4 * np_source.itemsize), dtype=np.uint8).view(np_source)
    if np_source.kind == "f":
        x = np.where(np.isfinite(x), x, 1).astype(np_source)
    node = onnx.helper.make_node("BitCast", ["x"], ["y"], to=getattr(T, target))
    data = onnx_model(
        onnx, [node], [("x", getattr(T, source), list(x.shape))], [("y", getattr(T, target), None)], opset=26
    )
    held = DType.INT32 if np_source in (np.int8, np.int16) else None
    got = ember.onnx.load(data)(Tensor.from_data(x, dtype=held)).to_numpy()
    want = x.view(np_target)
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_writes_each_batch_element_at_its_position_and_differentiates(rng, mode):
    onnx = import_onnx("onnx")
    T = onnx.TensorProto
    node = onnx.helper.make_node("TensorScatter", ["past", "update", "write"], ["present"], mode=mode, axis=2)
    data = onnx_model(
        onnx,
        [node],
        [("past", T.FLOAT, [2, 3, 5, 4]), ("update", T.FLOAT, [2, 3, 2, 4]), ("write", T.INT64, [2])],
        [("present", T.FLOAT, [2, 3, 5, 4])],
        opset=24,
    )
    past = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    update = rng.standard_normal((2, 3, 2, 4)).astype(np.float32)
    write = np.array([1, 4 if mode == "circular" else 3])
    want = past.copy()
    for b, start in enumerate(write):
        for s in range(2):
            want[b, :, (start + s) % 5] = update[b, :, s]
    device = Device.flex().autodiff()
    model = ember.onnx.load(data, device)
    upd = Tensor.from_data(update, device=device).set_require_grad(True)
    got = model(Tensor.from_data(past, device=device), upd, Tensor.from_data(write, device=device))
    np.testing.assert_array_equal(got.to_numpy(), want)
    g = rng.standard_normal(past.shape).astype(np.float32)
    grads = (got * Tensor.from_data(g, device=device)).sum().backward()
    want_grad = np.stack([g[b][:, [(write[b] + s) % 5 for s in range(2)]] for b in range(2)])
    np.testing.assert_array_equal(upd.grad(grads).to_numpy(), want_grad)
