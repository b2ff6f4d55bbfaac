"""GridSample against onnxruntime (opset 16's and 20's mode names, every padding mode,
align_corners) and a torch export's gradients; DeformConv against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import ember.onnx
from ember import Device, Tensor
from ember.errors import OnnxError
from tests.conftest import import_torch
from tests.onnx_import.helpers import export, import_onnx, onnx_model, run_ort


def grid_sample_model(onnx, opset, **attrs):
    TP = onnx.TensorProto
    node = onnx.helper.make_node("GridSample", ["X", "G"], ["Y"], **attrs)
    return onnx_model(
        onnx,
        [node],
        [("X", TP.FLOAT, [2, 3, 5, 6]), ("G", TP.FLOAT, [2, 4, 7, 2])],
        [("Y", TP.FLOAT, None)],
        opset=opset,
    )


@pytest.mark.parametrize("opset,mode", [(16, "bilinear"), (16, "nearest"), (20, "linear"), (20, "nearest")])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_matches_onnxruntime(rng, opset, mode, padding, align):
    onnx, ort = import_onnx(), import_onnx("onnxruntime")
    data = grid_sample_model(onnx, opset, mode=mode, padding_mode=padding, align_corners=align)
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    grid = rng.uniform(-1.3, 1.3, (2, 4, 7, 2)).astype(np.float32)
    (expected,) = run_ort(ort, data, x, grid)
    got = ember.onnx.load(data)(Tensor.from_data(x), Tensor.from_data(grid))
    np.testing.assert_allclose(got.to_numpy(), expected, rtol=1e-5, atol=1e-5)


def test_cubic_sampling_is_refused_by_attribute():
    onnx = import_onnx()
    with pytest.raises(OnnxError, match="mode='cubic'"):
        ember.onnx.load(grid_sample_model(onnx, 20, mode="cubic"))


def test_a_torch_export_gives_torchs_gradients(rng):
    torch = import_torch()

    class Warp(torch.nn.Module):
        def forward(self, x, grid):
            return torch.nn.functional.grid_sample(x, grid, padding_mode="border", align_corners=False)

    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    grid = rng.uniform(-1.0, 1.0, (1, 5, 5, 2)).astype(np.float32)
    data = export(torch, Warp(), (torch.as_tensor(x), torch.as_tensor(grid)), opset=16)
    device = Device.flex().autodiff()
    ex = Tensor.from_data(x, device=device).require_grad()
    eg = Tensor.from_data(grid, device=device).require_grad()
    grads = ember.onnx.load(data, device=device)(ex, eg).mul_scalar(2.0).sum().backward()
    tx, tg = torch.as_tensor(x).requires_grad_(), torch.as_tensor(grid).requires_grad_()
    (Warp()(tx, tg) * 2.0).sum().backward()
    np.testing.assert_allclose(ex.grad(grads).to_numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(eg.grad(grads).to_numpy(), tg.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("with_mask", [False, True], ids=["v1", "v2-mask"])
def test_deform_conv_matches_onnxruntime(rng, with_mask):
    """Groups, offset groups, asymmetric pads, strides and dilations; offsets large enough
    to sample outside the input (zeros there)."""
    onnx = import_onnx()
    ort = import_onnx("onnxruntime")
    TP = onnx.TensorProto
    x = rng.standard_normal((2, 4, 6, 7)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 2)).astype(np.float32)
    oh, ow = (6 + 2 - 3) // 2 + 1, (7 + 2 - 3) // 1 + 1
    arrays = [
        x,
        w,
        (rng.standard_normal((2, 2 * 6 * 2, oh, ow)) * 1.5).astype(np.float32),
        rng.standard_normal(6).astype(np.float32),
    ]
    if with_mask:
        arrays.append(rng.uniform(0, 1, (2, 2 * 6, oh, ow)).astype(np.float32))
    names = ["x", "w", "offset", "b", "mask"][: len(arrays)]
    node = onnx.helper.make_node(
        "DeformConv", names, ["y"], group=2, offset_group=2, pads=[1, 0, 1, 2], strides=[2, 1], dilations=[1, 2]
    )
    inputs = [(n, TP.FLOAT, list(a.shape)) for n, a in zip(names, arrays)]
    data = onnx_model(onnx, [node], inputs, [("y", TP.FLOAT, None)], opset=19)
    got = ember.onnx.load(data)(*[Tensor.from_data(a) for a in arrays]).to_numpy()
    np.testing.assert_allclose(got, run_ort(ort, data, *arrays)[0], rtol=1e-4, atol=1e-5)
