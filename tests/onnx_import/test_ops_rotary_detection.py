"""RotaryEmbedding (opset 23), NonMaxSuppression and RoiAlign against onnxruntime, with
hand-built nodes; gradients through RotaryEmbedding and RoiAlign on an autodiff device."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember.onnx
from ember import Device, Tensor
from ember.errors import OnnxError
from tests.onnx_import.helpers import onnx_model, run_ort
from tests.onnx_import.test_spec import run_ember

F32, I64 = 1, 7

pytestmark = pytest.mark.filterwarnings("ignore:.*newer than the opsets ember.onnx documents")


def rotary_case(onnx: Any, rng: Any, rank: int, interleaved: int, rotary_dim: int, positions: bool):
    batch, heads, seq, size, max_pos = 2, 3, 5, 8, 12
    half = (rotary_dim or size) // 2
    x = rng.standard_normal((batch, heads, seq, size) if rank == 4 else (batch, seq, heads * size))
    angles = rng.uniform(0, 6, (max_pos, half) if positions else (batch, seq, half))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    inputs = [("x", F32, list(x.shape)), ("cos", F32, list(cos.shape)), ("sin", F32, list(sin.shape))]
    arrays = [x.astype(np.float32), cos, sin]
    if positions:
        inputs.append(("pos", I64, [batch, seq]))
        arrays.append(rng.integers(0, max_pos, (batch, seq)).astype(np.int64))
    attrs: dict[str, Any] = {"interleaved": interleaved}
    if rotary_dim:
        attrs["rotary_embedding_dim"] = rotary_dim
    if rank == 3:
        attrs["num_heads"] = heads
    node = onnx.helper.make_node("RotaryEmbedding", [n for n, _, _ in inputs], ["y"], **attrs)
    data = onnx_model(onnx, [node], inputs, [("y", F32, list(x.shape))], opset=23)
    return data, arrays


@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rotary_dim", [0, 4])
@pytest.mark.parametrize("positions", [True, False])
def test_rotary_embedding(onnx, ort, rng, rank, interleaved, rotary_dim, positions):
    data, arrays = rotary_case(onnx, rng, rank, interleaved, rotary_dim, positions)
    (got,) = run_ember(data, *arrays)
    np.testing.assert_allclose(got, run_ort(ort, data, *arrays)[0], rtol=1e-5, atol=1e-6)


def test_rotary_embedding_gradient_is_the_inverse_rotation(onnx, rng):
    """The rotation is orthogonal: the gradient of ``sum(y * g)`` is ``g`` rotated back."""
    data, arrays = rotary_case(onnx, rng, 4, 0, 0, False)
    device = Device.flex().autodiff()
    model = ember.onnx.load(data, device)
    x = Tensor.from_data(arrays[0], device=device).require_grad()
    g = rng.standard_normal(arrays[0].shape).astype(np.float32)
    y = model(x, *[Tensor.from_data(a, device=device) for a in arrays[1:]])
    grads = (y * Tensor.from_data(g, device=device)).sum().backward()
    cos, sin = arrays[1][:, None], arrays[2][:, None]  # [batch, 1, seq, half]
    g1, g2 = g[..., :4], g[..., 4:]
    expected = np.concatenate([cos * g1 + sin * g2, -sin * g1 + cos * g2], -1)
    np.testing.assert_allclose(x.grad(grads).to_numpy(), expected, rtol=1e-5, atol=1e-6)


def test_rotary_embedding_3d_without_num_heads_is_refused(onnx, rng):
    data, arrays = rotary_case(onnx, rng, 3, 0, 0, False)
    model = onnx.load_from_string(data)
    attrs = model.graph.node[0].attribute
    attrs.remove(next(a for a in attrs if a.name == "num_heads"))
    with pytest.raises(OnnxError, match="num_heads"):
        run_ember(model.SerializeToString(), *arrays)
