"""ai.onnx.preview.FlexAttention: a causal ``score_mod`` subgraph (reading the scores'
shape), a ``prob_mod`` subgraph and grouped query heads, against PyTorch's
``scaled_dot_product_attention``, forward and the gradient of the queries."""

from __future__ import annotations

import numpy as np
import pytest

import ember.onnx
from ember import Device, Tensor
from tests.conftest import import_torch
from tests.onnx_import.helpers import import_onnx, onnx_model

pytestmark = pytest.mark.filterwarnings("ignore:.*newer than the opsets ember.onnx documents")


def _flex_model(onnx, shapes, out_shape, scale):
    helper, T = onnx.helper, onnx.TensorProto
    c = onnx.numpy_helper.from_array
    causal = helper.make_graph(
        [
            helper.make_node("Shape", ["s"], ["shape"]),
            helper.make_node("Gather", ["shape", "i2"], ["L"], axis=0),
            helper.make_node("Gather", ["shape", "i3"], ["S"], axis=0),
            helper.make_node("Range", ["zero", "L", "one"], ["qr"]),
            helper.make_node("Reshape", ["qr", "qs"], ["qi"]),
            helper.make_node("Range", ["zero", "S", "one"], ["kr"]),
            helper.make_node("Reshape", ["kr", "ks"], ["ki"]),
            helper.make_node("GreaterOrEqual", ["qi", "ki"], ["keep"]),
            helper.make_node("Where", ["keep", "s", "ninf"], ["out"]),
        ],
        "causal",
        [helper.make_tensor_value_info("s", T.FLOAT, ["B", "H", "L", "S"])],
        [helper.make_tensor_value_info("out", T.FLOAT, ["B", "H", "L", "S"])],
        [
            c(np.int64(2), "i2"),
            c(np.int64(3), "i3"),
            c(np.int64(0), "zero"),
            c(np.int64(1), "one"),
            c(np.array([1, 1, -1, 1], np.int64), "qs"),
            c(np.array([1, 1, 1, -1], np.int64), "ks"),
            c(np.float32(-np.inf), "ninf"),
        ],
    )
    halve = helper.make_graph(
        [helper.make_node("Mul", ["p", "half"], ["out"])],
        "halve",
        [helper.make_tensor_value_info("p", T.FLOAT, ["B", "H", "L", "S"])],
        [helper.make_tensor_value_info("out", T.FLOAT, ["B", "H", "L", "S"])],
        [c(np.float32(0.5), "half")],
    )
    node = helper.make_node(
        "FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview", scale=scale, score_mod=causal, prob_mod=halve
    )
    inputs = [(n, T.FLOAT, list(s)) for n, s in zip("qkv", shapes)]
    return onnx_model(
        onnx, [node], inputs, [("y", T.FLOAT, list(out_shape))], opset=23, domains={"ai.onnx.preview": 1}, check=False
    )


def test_flex_attention_matches_torch_forward_and_backward(rng):
    onnx = import_onnx("onnx")
    torch = import_torch()
    q = rng.standard_normal((2, 4, 5, 8)).astype(np.float32)
    k = rng.standard_normal((2, 2, 5, 8)).astype(np.float32)
    v = rng.standard_normal((2, 2, 5, 6)).astype(np.float32)
    g = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    data = _flex_model(onnx, (q.shape, k.shape, v.shape), g.shape, 0.3)
    device = Device.flex().autodiff()
    model = ember.onnx.load(data, device)
    tq = Tensor.from_data(q, device=device).set_require_grad(True)
    y = model(tq, Tensor.from_data(k, device=device), Tensor.from_data(v, device=device))
    grads = (y * Tensor.from_data(g, device=device)).sum().backward()
    pq = torch.tensor(q, dtype=torch.float64, requires_grad=True)
    kk, vv = (torch.tensor(a, dtype=torch.float64).repeat_interleave(2, 1) for a in (k, v))
    want = 0.5 * torch.nn.functional.scaled_dot_product_attention(pq, kk, vv, is_causal=True, scale=0.3)
    (want * torch.tensor(g, dtype=torch.float64)).sum().backward()
    np.testing.assert_allclose(y.to_numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tq.grad(grads).to_numpy(), pq.grad.numpy(), rtol=1e-4, atol=1e-5)
