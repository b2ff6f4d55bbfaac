"""RMSNormalization and Attention (opsets 23-24) against onnxruntime with hand-built
nodes: the attributes ``test_ops_added.py`` leaves out, and RMSNormalization's scale
training by default."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember.onnx
from ember import Device, Tensor
from tests.onnx_import.helpers import onnx_model, run_ort
from tests.onnx_import.test_spec import run_ember

F32, F16, BOOL = 1, 10, 9

pytestmark = pytest.mark.filterwarnings("ignore:.*newer than the opsets ember.onnx documents")


def rms_model(onnx: Any, rng: Any, shape: tuple[int, ...], axis: int, eps: float, elem: int = F32):
    dtype = np.float16 if elem == F16 else np.float32
    scale = onnx.numpy_helper.from_array((rng.standard_normal(shape[axis:]) + 1).astype(dtype), "scale")
    node = onnx.helper.make_node("RMSNormalization", ["x", "scale"], ["y"], axis=axis, epsilon=eps, stash_type=1)
    return onnx_model(onnx, [node], [("x", elem, list(shape))], [("y", elem, list(shape))], [scale], opset=23)


@pytest.mark.parametrize(("axis", "eps"), [(-1, 1e-5), (-2, 1e-3), (1, 0.5), (0, 1e-6)])
def test_rms_normalization_axes(onnx, ort, rng, axis, eps):
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    data = rms_model(onnx, rng, x.shape, axis, eps)
    (got,) = run_ember(data, x)
    np.testing.assert_allclose(got, run_ort(ort, data, x)[0], rtol=1e-5, atol=1e-6)


def test_rms_normalization_float16_statistics_in_float32(onnx, ort, rng):
    """stash_type=1: a float16 input's mean square is taken in float32 (values whose
    squares overflow float16 still normalize)."""
    x = (rng.standard_normal((3, 8)) * 300).astype(np.float16)
    data = rms_model(onnx, rng, x.shape, -1, 1e-5, F16)
    (got,) = run_ember(data, x)
    assert got.dtype == np.float16 and np.isfinite(got).all()
    np.testing.assert_allclose(
        got.astype(np.float32), run_ort(ort, data, x)[0].astype(np.float32), rtol=2e-3, atol=2e-3
    )


def test_rms_normalization_other_stash_type_is_refused(onnx, rng):
    model = onnx.load_from_string(rms_model(onnx, rng, (2, 4), -1, 1e-5))
    next(a for a in model.graph.node[0].attribute if a.name == "stash_type").i = 11
    with pytest.raises(ember.errors.OnnxError, match="stash_type"):
        ember.onnx.load(model.SerializeToString(), Device.flex())


def test_rms_normalization_scale_trains_by_default(onnx, rng):
    """The scale initializer is a weight (``RMSNormalization scale``); its gradient
    matches the float64 formula ``sum(x / rms(x) * g)`` over the leading dims."""
    x = rng.standard_normal((4, 6)).astype(np.float32)
    data = rms_model(onnx, rng, x.shape, -1, 1e-5)
    device = Device.flex().autodiff()
    model = ember.onnx.load(data, device)
    assert set(model.weights) == {"scale"}
    assert {r.name: r.reason for r in model.describe_params()}["scale"] == "RMSNormalization scale"
    g = rng.standard_normal(x.shape).astype(np.float32)
    y = model(Tensor.from_data(x, device=device))
    grads = (y * Tensor.from_data(g, device=device)).sum().backward()
    x64 = x.astype(np.float64)
    normed = x64 / np.sqrt((x64**2).mean(-1, keepdims=True) + 1e-5)
    got = model.weights["scale"].val().grad(grads).to_numpy()
    np.testing.assert_allclose(got, (normed * g).sum(0), rtol=1e-5, atol=1e-5)


def attention_case(onnx, rng, mask: str | None, causal: int, attrs: dict[str, Any], past: bool, outputs: int):
    """3-d Attention: 4 query heads over 2 key/value heads (GQA), head size 4."""
    b, sq, skv, hq, hkv, d = 2, 3, 4, 4, 2, 4
    arrays = [
        rng.standard_normal((b, sq, hq * d)).astype(np.float32),
        rng.standard_normal((b, skv, hkv * d)).astype(np.float32),
        rng.standard_normal((b, skv, hkv * d)).astype(np.float32),
    ]
    inputs = [("q", F32, [b, sq, hq * d]), ("k", F32, [b, skv, hkv * d]), ("v", F32, [b, skv, hkv * d])]
    names = ["q", "k", "v"]
    total = skv + (2 if past else 0)
    if mask == "bool":
        m = rng.random((sq, total)) > 0.3
        m[:, 0] = True
        arrays.append(m)
        inputs.append(("m", BOOL, [sq, total]))
    elif mask == "float":
        arrays.append((rng.standard_normal((b, 1, sq, total)) * 2).astype(np.float32))
        inputs.append(("m", F32, [b, 1, sq, total]))
    names.append("m" if mask else "")
    if past:
        for n in ("pk", "pv"):
            arrays.append(rng.standard_normal((b, hkv, 2, d)).astype(np.float32))
            inputs.append((n, F32, [b, hkv, 2, d]))
            names.append(n)
    outs = ["y", "present_k", "present_v", "qk"][:outputs]
    node = onnx.helper.make_node("Attention", names, outs, is_causal=causal, q_num_heads=hq, kv_num_heads=hkv, **attrs)
    shapes = [[b, sq, hq * d], [b, hkv, total, d], [b, hkv, total, d], [b, hq, sq, total]]
    data = onnx_model(onnx, [node], inputs, [(o, F32, s) for o, s in zip(outs, shapes)], opset=23)
    return data, arrays


@pytest.mark.parametrize(
    ("mask", "causal", "attrs", "past", "outputs"),
    [
        (None, 0, {}, False, 1),
        ("bool", 0, {"scale": 0.3}, False, 1),
        ("float", 1, {}, False, 1),
        (None, 1, {"softcap": 2.0}, True, 3),
        ("bool", 1, {"qk_matmul_output_mode": 0}, True, 4),
        ("float", 0, {"qk_matmul_output_mode": 1}, False, 4),
        ("float", 0, {"qk_matmul_output_mode": 2, "softcap": 1.5}, False, 4),
        ("bool", 0, {"qk_matmul_output_mode": 3}, True, 4),
    ],
)
def test_attention_3d_grouped_heads(onnx, ort, rng, mask, causal, attrs, past, outputs):
    data, arrays = attention_case(onnx, rng, mask, causal, attrs, past, outputs)
    got = run_ember(data, *arrays)
    want = run_ort(ort, data, *arrays)
    assert len(got) == outputs
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
