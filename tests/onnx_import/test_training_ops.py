"""ai.onnx.preview.training's Momentum (Nesterov) and Adam over two tensors at once,
stepped three times, against ``torch.optim``'s SGD and Adam (the same formulas)."""

from __future__ import annotations

import numpy as np
import pytest

import ember.onnx
from ember import Tensor
from tests.conftest import import_torch
from tests.onnx_import.helpers import import_onnx, onnx_model

SHAPES = [(3, 4), (5,)]


def _optimizer_model(onnx, op, states, **attrs):
    T = onnx.TensorProto
    groups = ["x", "g", *states]
    names = ["r", "t"] + [f"{k}{i}" for k in groups for i in range(len(SHAPES))]
    outs = [f"new_{k}{i}" for k in ["x", *states] for i in range(len(SHAPES))]
    inputs = [("r", T.FLOAT, []), ("t", T.INT64, [])]
    inputs += [(f"{k}{i}", T.FLOAT, list(s)) for k in groups for i, s in enumerate(SHAPES)]
    node = onnx.helper.make_node(op, names, outs, domain="ai.onnx.preview.training", **attrs)
    outputs = [(o, T.FLOAT, list(SHAPES[i % len(SHAPES)])) for i, o in enumerate(outs)]
    return onnx_model(onnx, [node], inputs, outputs, opset=17, domains={"ai.onnx.preview.training": 1}, check=False)


@pytest.mark.parametrize("kind", ["momentum", "adam"])
def test_optimizer_operators_match_torch_optim(rng, kind):
    onnx = import_onnx("onnx")
    torch = import_torch()
    if kind == "momentum":
        data = _optimizer_model(onnx, "Momentum", ["v"], alpha=0.9, beta=1.0, mode="nesterov", norm_coefficient=0.01)
        first_step = 0
    else:
        data = _optimizer_model(onnx, "Adam", ["v", "h"], alpha=0.9, beta=0.999, epsilon=1e-8)
        first_step = 1
    model = ember.onnx.load(data)
    xs = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    params = [torch.tensor(x, requires_grad=True) for x in xs]
    if kind == "momentum":
        opt = torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)
    else:
        opt = torch.optim.Adam(params, lr=0.1, eps=1e-8)
    states = [np.zeros(s, np.float32) for _ in range(1 if kind == "momentum" else 2) for s in SHAPES]
    ours = list(xs)
    for step in range(3):
        grads = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
        for p, g in zip(params, grads):
            p.grad = torch.tensor(g)
        opt.step()
        feeds = [np.float32(0.1), np.int64(first_step + step), *ours, *grads, *states]
        out = [o.to_numpy() for o in model(*[Tensor.from_data(np.asarray(f)) for f in feeds])]
        ours, states = out[: len(SHAPES)], out[len(SHAPES) :]
        for got, p in zip(ours, params):
            np.testing.assert_allclose(got, p.detach().numpy(), rtol=1e-5, atol=1e-6)
