"""Det (batched, through ember.linalg) and MeanVarianceNormalization (default and given
axes) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import ember.onnx
from ember import Device, Tensor
from tests.onnx_import.helpers import import_onnx, onnx_model, run_ort


def one_node(onnx, op, shape, out_shape, **attrs):
    TP = onnx.TensorProto
    node = onnx.helper.make_node(op, ["X"], ["Y"], **attrs)
    return onnx_model(onnx, [node], [("X", TP.FLOAT, list(shape))], [("Y", TP.FLOAT, list(out_shape))], opset=17)


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (2, 3, 2, 2)])
def test_det_matches_onnxruntime_and_differentiates(rng, shape):
    onnx, ort = import_onnx(), import_onnx("onnxruntime")
    data = one_node(onnx, "Det", shape, shape[:-2])
    x = rng.standard_normal(shape).astype(np.float32)
    (expected,) = run_ort(ort, data, x)
    device = Device.flex().autodiff()
    xe = Tensor.from_data(x, device=device).require_grad()
    y = ember.onnx.load(data, device=device)(xe)
    np.testing.assert_allclose(y.to_numpy(), expected, rtol=1e-4, atol=1e-5)
    # d det / dX = det * inv(X)^T
    grad = xe.grad(y.sum().backward()).to_numpy()
    x64 = x.astype(np.float64)
    want = np.linalg.det(x64)[..., None, None] * np.swapaxes(np.linalg.inv(x64), -1, -2)
    np.testing.assert_allclose(grad, want, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("attrs", [{}, {"axes": [1]}, {"axes": [2, 3]}, {"axes": [-1]}])
def test_mean_variance_normalization_matches_onnxruntime(rng, attrs):
    onnx, ort = import_onnx(), import_onnx("onnxruntime")
    data = one_node(onnx, "MeanVarianceNormalization", (2, 3, 4, 5), (2, 3, 4, 5), **attrs)
    x = (rng.standard_normal((2, 3, 4, 5)) * 3 + 1).astype(np.float32)
    (expected,) = run_ort(ort, data, x)
    got = ember.onnx.load(data)(Tensor.from_data(x))
    np.testing.assert_allclose(got.to_numpy(), expected, rtol=1e-4, atol=1e-4)
