"""cube's quantized matmul kernel (WGSL, dequantizing the packed weight in registers)
against a float64 reference computed from the dequantized weights, on Mesa's software
Vulkan (the cube device fixtures skip without an adapter, fail under EMBER_REQUIRE_GPU=1)."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Tensor
from ember.quantization import QuantScheme, quantize, quantized_linear
from tests.conftest import make_device

WEIGHT_ONLY = [
    QuantScheme.int8(),
    QuantScheme.int8(symmetric=False),
    QuantScheme.int8(level="tensor"),
    QuantScheme.int8(block=32),
    QuantScheme.int4(),
    QuantScheme.int4(block=16, symmetric=False),
    QuantScheme.int4(block=None),
]


@pytest.mark.parametrize("scheme", WEIGHT_ONLY, ids=repr)
@pytest.mark.parametrize("shape", [(1,), (3, 5), (16,)], ids=["vector-row", "batch", "16-rows"])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
def test_weight_only_kernel_matches_float64_of_the_dequantized_weight(scheme, shape, with_bias, rng):
    cube = make_device("cube")
    w = rng.standard_normal((24, 64)).astype(np.float32)
    x = rng.standard_normal((*shape, 64)).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32) if with_bias else None
    q = quantize(Tensor.from_data(w), scheme)
    expected = x.astype(np.float64) @ q.dequantize().to_numpy().astype(np.float64).T
    if b is not None:
        expected = expected + b
    qc = q.to_device(cube)
    bias = None if b is None else Tensor.from_data(b, device=cube)
    xc = Tensor.from_data(x, device=cube)
    stats = cube.backend.runtime.stats
    launches = stats["launches"]
    got = quantized_linear(xc, qc, bias)
    assert stats["launches"] - launches == 1  # one kernel: no float weight, no separate matmul
    np.testing.assert_allclose(got.to_numpy(), expected, rtol=1e-5, atol=1e-5)
    one = quantized_linear(Tensor.from_data(x.reshape(-1, 64)[0], device=cube), qc, bias)  # a vector input
    np.testing.assert_allclose(one.to_numpy(), expected.reshape(-1, 24)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["cube+autodiff", "cube+fusion"])
def test_decorated_cube_devices_and_a_strided_input(name, rng):
    device = make_device(name)
    w = rng.standard_normal((16, 32)).astype(np.float32)
    x = rng.standard_normal((32, 4)).astype(np.float32)  # given transposed: a strided view
    q = quantize(Tensor.from_data(w), QuantScheme.int4(block=16))
    expected = x.T.astype(np.float64) @ q.dequantize().to_numpy().astype(np.float64).T
    got = quantized_linear(Tensor.from_data(x, device=device).swap_dims(0, 1), q.to_device(device.inner()))
    np.testing.assert_allclose(got.to_numpy(), expected, rtol=1e-5, atol=1e-5)


def test_prefill_rows_take_the_composite(rng):
    from ember.backend.cube.kernels.quant_matmul import MAX_ROWS

    cube = make_device("cube")
    w = rng.standard_normal((8, 32)).astype(np.float32)
    x = rng.standard_normal((MAX_ROWS + 1, 32)).astype(np.float32)
    q = quantize(Tensor.from_data(w), QuantScheme.int4(block=16))
    expected = x.astype(np.float64) @ q.dequantize().to_numpy().astype(np.float64).T
    stats = cube.backend.runtime.stats
    launches = stats["launches"]
    got = quantized_linear(Tensor.from_data(x, device=cube), q.to_device(cube))
    assert stats["launches"] - launches > 1  # dequantize, then the float matmul
    np.testing.assert_allclose(got.to_numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activations", ["dynamic", "static"])
@pytest.mark.parametrize("level", ["channel", "tensor"])
def test_activation_schemes_read_the_packed_weight_on_cube(activations, level, rng, monkeypatch):
    """The input rounded to its int8 grid (per row, or the calibrated scale), then the
    packed weight in registers: the float weight is never built (the composite's
    ``dequantize`` raises here). Oracle: float64 of the rounded input times the
    dequantized weight."""
    import ember.backend.composites.quantized as composite

    cube = make_device("cube")
    w = rng.standard_normal((8, 32)).astype(np.float32)
    x = rng.standard_normal((3, 32)).astype(np.float32)
    x[1] = 0.0  # a zero row: its scale is clamped, its output the bias
    q = quantize(Tensor.from_data(w), QuantScheme.int8(level, activations=activations))
    b = rng.standard_normal(8).astype(np.float32)
    input_scale = np.array([0.03], np.float32) if activations == "static" else None
    step = input_scale[0] if input_scale is not None else np.maximum(np.abs(x).max(1, keepdims=True) / 127, 1e-30)
    xq = np.clip(np.round(x / step), -127, 127) * step
    expected = xq.astype(np.float64) @ q.dequantize().to_numpy().astype(np.float64).T + b

    def refuse(*args, **kwargs):
        raise AssertionError("the float weight was built")

    monkeypatch.setattr(composite, "dequantize", refuse)
    scale = None if input_scale is None else Tensor.from_data(input_scale, device=cube)
    got = quantized_linear(Tensor.from_data(x, device=cube), q.to_device(cube), Tensor.from_data(b, device=cube), scale)
    np.testing.assert_allclose(got.to_numpy(), expected, rtol=1e-5, atol=1e-5)
