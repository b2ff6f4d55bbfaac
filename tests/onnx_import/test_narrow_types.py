"""8-bit floats, FLOAT4E2M1 and 4-bit ints held widened (``ember.onnx.dtypes``): Cast
(saturating and not), QuantizeLinear/DequantizeLinear and an int4 weight-only layer,
against onnxruntime, and the rounding against ml_dtypes (float64 values rounded by
ml_dtypes' own casts)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ember
import ember.onnx
from ember import Device, Tensor
from ember.backend.dtype import DType
from tests.onnx_import.helpers import onnx_model, run_ort

F = 1
FLOAT8 = {
    17: ml_dtypes.float8_e4m3fn,
    18: ml_dtypes.float8_e4m3fnuz,
    19: ml_dtypes.float8_e5m2,
    20: ml_dtypes.float8_e5m2fnuz,
}


def values(rng) -> np.ndarray:
    """Values of every magnitude a float8 rounds: subnormals, normals, ties, beyond the
    largest finite value, infinities and a NaN."""
    x = np.concatenate(
        [
            rng.standard_normal(40) * 10.0 ** rng.integers(-4, 5, 40),
            [0.0, -0.0, 1.0625, 1.1875, 448.0, 464.0, 500.0, 57344.0, 70000.0, -1e6, np.inf, -np.inf, np.nan],
        ]
    )
    return x.astype(np.float32)


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("elem", sorted(FLOAT8))
def test_cast_through_a_float8_type(onnx, ort, rng, elem, saturate):
    """float32 -> float8 -> float32 in one model (onnxruntime runs float8 casts from opset
    19), and the rounding against ml_dtypes' cast of the same values."""
    nodes = [
        onnx.helper.make_node("Cast", ["x"], ["q"], to=elem, saturate=saturate),
        onnx.helper.make_node("Cast", ["q"], ["y"], to=F),
    ]
    data = onnx_model(onnx, nodes, [("x", F, [53])], [("y", F, [53])], opset=19)
    x = values(rng)
    got = ember.onnx.load(data, Device.flex())(Tensor.from_data(x)).to_numpy()
    np.testing.assert_array_equal(got, run_ort(ort, data, x)[0])
    dtype = FLOAT8[elem]
    with np.errstate(all="ignore"):
        clipped = np.clip(x, float(ml_dtypes.finfo(dtype).min), float(ml_dtypes.finfo(dtype).max)) if saturate else x
        np.testing.assert_array_equal(got, clipped.astype(dtype).astype(np.float32))


def test_a_float8_tensor_is_held_in_float32(onnx, rng):
    """A float8 graph input and output: the tensor is float32 holding float8 values."""
    nodes = [onnx.helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])]
    data = onnx_model(onnx, nodes, [("x", 17, [2, 3])], [("y", 17, [3, 2])], opset=19)
    model = ember.onnx.load(data, Device.flex())
    assert model.program.inputs[0].dtype is DType.FLOAT32
    x = rng.standard_normal((2, 3)).astype(ml_dtypes.float8_e4m3fn)
    got = model(Tensor.from_data(x.astype(np.float32)))
    assert got.dtype is DType.FLOAT32
    np.testing.assert_array_equal(got.to_numpy(), x.astype(np.float32).T)


@pytest.mark.parametrize("elem", [17, 19, 21, 22])
def test_quantize_and_dequantize(onnx, ort, rng, elem):
    """QuantizeLinear to a float8 or 4-bit type and back, per channel (axis 1), against
    onnxruntime (the dequantized values, float32)."""
    zero_dtype = {17: ml_dtypes.float8_e4m3fn, 19: ml_dtypes.float8_e5m2, 21: ml_dtypes.uint4, 22: ml_dtypes.int4}
    zeros = np.array([0, 0, 0], zero_dtype[elem]) if elem in FLOAT8 else np.array([3, 0, 1], zero_dtype[elem])
    scales = np.array([0.05, 0.5, 2.0], np.float32)
    nodes = [
        onnx.helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"], axis=1),
        onnx.helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"], axis=1),
    ]
    inits = [onnx.numpy_helper.from_array(scales, "scale"), onnx.helper.make_tensor("zero", elem, [3], zeros.tolist())]
    if elem in FLOAT8:
        inits[1] = onnx.helper.make_tensor("zero", elem, [3], [0.0, 0.0, 0.0])
    data = onnx_model(onnx, nodes, [("x", F, [4, 3])], [("y", F, [4, 3])], inits, opset=21)
    x = (rng.standard_normal((4, 3)) * 4).astype(np.float32)
    got = ember.onnx.load(data, Device.flex())(Tensor.from_data(x)).to_numpy()
    np.testing.assert_allclose(got, run_ort(ort, data, x)[0], rtol=1e-6, atol=0)


def test_an_int4_weight_only_linear_layer(onnx, ort, rng):
    """A blocked int4 weight (packed two per byte in the file) dequantized and multiplied:
    the weight-only quantized layer that exporters write, against onnxruntime."""
    w = rng.integers(-8, 8, (8, 6))
    scales = (rng.uniform(0.01, 0.1, (2, 6))).astype(np.float32)  # one per block of 4 rows
    nodes = [
        onnx.helper.make_node("DequantizeLinear", ["w", "scale"], ["wf"], axis=0, block_size=4),
        onnx.helper.make_node("MatMul", ["x", "wf"], ["y"]),
    ]
    inits = [
        onnx.helper.make_tensor("w", 22, [8, 6], w.flatten().tolist()),
        onnx.numpy_helper.from_array(scales, "scale"),
    ]
    data = onnx_model(onnx, nodes, [("x", F, [3, 8])], [("y", F, [3, 6])], inits, opset=21)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    model = ember.onnx.load(data, Device.flex())
    np.testing.assert_allclose(model(Tensor.from_data(x)).to_numpy(), run_ort(ort, data, x)[0], rtol=1e-5, atol=1e-6)
    want = x.astype(np.float64) @ (w * np.repeat(scales, 4, axis=0))
    np.testing.assert_allclose(model(Tensor.from_data(x)).to_numpy(), want, rtol=1e-5, atol=1e-6)
