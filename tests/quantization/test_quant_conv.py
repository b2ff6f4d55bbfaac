"""Quantized convolutions as a GEMM over the packed weight: ``quantized_conv`` against
torch's float64 convolution of the dequantized weight (1-d, 2-d and 3-d; strides, pads,
dilations, groups; int8/uint8/int4 schemes), and ``QuantizedConv1d/2d`` never building the
float weight."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ember import Device, Tensor
from ember.errors import ShapeError
from ember.nn import Conv1dConfig, Conv2dConfig
from ember.quantization import QuantizedTensor, QuantScheme, quantize
from ember.tensor.quant.conv import quantized_conv

SCHEMES = [
    QuantScheme.int8(),
    QuantScheme.int8(symmetric=False),
    QuantScheme.int8(level="tensor"),
    QuantScheme.int4(block=None),
    QuantScheme.int4(symmetric=False, block=None),
]
TORCH_CONV = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d, 3: torch.nn.functional.conv3d}


def reference(x, q: QuantizedTensor, kernel_shape, bias, stride, padding, dilation, groups):
    w = torch.from_numpy(q.dequantize().to_numpy().astype(np.float64)).reshape(kernel_shape)
    b = None if bias is None else torch.from_numpy(bias.astype(np.float64))
    fn = TORCH_CONV[len(kernel_shape) - 2]
    return fn(torch.from_numpy(x.astype(np.float64)), w, b, stride, padding, dilation, groups).numpy()


CASES = [  # kernel_shape, input spatial, stride, padding, dilation, groups
    ((8, 4, 3, 3), (9, 7), 1, 1, 1, 1),
    ((6, 2, 3, 2), (10, 9), (2, 1), (1, 0), (1, 2), 2),
    ((8, 4, 5), (33,), 2, 2, 1, 1),
    ((4, 1, 4), (16,), 1, 0, 3, 4),  # depthwise
    ((4, 2, 2, 2, 2), (5, 4, 6), 1, 1, 1, 1),
]


@pytest.mark.parametrize("scheme", SCHEMES, ids=repr)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"k{list(c[0])}")
def test_quantized_conv_matches_float64_conv_of_the_dequantized_weight(scheme, case, rng):
    kernel_shape, spatial, stride, padding, dilation, groups = case
    c_out, c_group = kernel_shape[:2]
    cols = int(np.prod(kernel_shape[1:]))
    w = rng.standard_normal((c_out, cols)).astype(np.float32)
    x = rng.standard_normal((3, c_group * groups, *spatial)).astype(np.float32)
    bias = rng.standard_normal(c_out).astype(np.float32)
    q = quantize(Tensor.from_data(w), scheme)
    got = quantized_conv(
        Tensor.from_data(x), q, kernel_shape, Tensor.from_data(bias), stride, padding, dilation, groups
    ).to_numpy()
    expected = reference(x, q, kernel_shape, bias, stride, padding, dilation, groups)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)


def test_quantized_conv_with_many_positions_takes_the_tiled_path(rng):
    """Enough rows (batch x positions >= 32) for the dequantized-tile GEMM path on flex."""
    kernel_shape = (16, 8, 3, 3)
    w = rng.standard_normal((16, 72)).astype(np.float32)
    x = rng.standard_normal((2, 8, 12, 12)).astype(np.float32)
    q = quantize(Tensor.from_data(w), QuantScheme.int8())
    got = quantized_conv(Tensor.from_data(x), q, kernel_shape, None, 1, "same").to_numpy()
    np.testing.assert_allclose(got, reference(x, q, kernel_shape, None, 1, 1, 1, 1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("scheme", [QuantScheme.int8(), QuantScheme.int4(block=32)], ids=repr)
def test_quantized_conv2d_layer_never_dequantizes_its_weight(scheme, rng, monkeypatch):
    layer = Conv2dConfig((4, 8), (2, 4), padding=1).init(Device.flex())
    q = layer.quantized(scheme)
    x = Tensor.from_data(rng.standard_normal((2, 4, 6, 7)).astype(np.float32))
    expected = reference(
        x.to_numpy(),
        q.weight,
        q.kernel_shape,
        q.bias.val().to_numpy(),
        1,
        1,
        1,
        1,
    )

    def refuse(self):
        raise AssertionError("the quantized convolution dequantized its weight")

    monkeypatch.setattr(QuantizedTensor, "dequantize", refuse)
    np.testing.assert_allclose(q(x).to_numpy(), expected, rtol=1e-5, atol=1e-4)


def test_quantized_conv1d_dynamic_rounds_each_sample_to_the_int8_grid(rng):
    layer = Conv1dConfig(4, 6, 3).init(Device.flex())
    q = layer.quantized(QuantScheme.int8(activations="dynamic"))
    x = rng.standard_normal((2, 4, 20)).astype(np.float32)
    scale = np.abs(x).reshape(2, -1).max(axis=1) / 127
    xq = np.clip(np.rint(x / scale[:, None, None]), -127, 127) * scale[:, None, None]
    expected = reference(xq, q.weight, q.kernel_shape, q.bias.val().to_numpy(), 1, 0, 1, 1)
    np.testing.assert_allclose(q(Tensor.from_data(x)).to_numpy(), expected, rtol=1e-5, atol=1e-4)


def test_quantized_conv2d_static_runs_the_int8_kernel_with_its_calibrated_scale(rng, monkeypatch):
    """A static scheme's layer passes its one calibrated scale to the int8 x int8 kernel
    (no rounding pass before it): against float64 of the input rounded with that scale
    times the dequantized weight."""
    from ember.backend.flex import FlexBackend

    layer = Conv2dConfig((16, 8), 3, padding=1).init(Device.flex())
    x = rng.standard_normal((3, 16, 12, 12)).astype(np.float32)
    scale = float(np.abs(x).max()) / 127 * 0.8  # some values saturate at +-127
    q = layer.quantized(QuantScheme.int8(activations="static"), input_scale=scale)
    s32 = np.float32(scale)
    xq = np.clip(np.rint(x / s32), -127, 127) * s32
    expected = reference(xq, q.weight, q.kernel_shape, q.bias.val().to_numpy(), 1, 1, 1, 1)
    schemes = []
    kernel = FlexBackend.quantized_conv

    def spy(self, *args, **kwargs):
        schemes.append(args[8])
        return kernel(self, *args, **kwargs)

    monkeypatch.setattr(FlexBackend, "quantized_conv", spy)
    np.testing.assert_allclose(q(Tensor.from_data(x)).to_numpy(), expected, rtol=1e-5, atol=1e-4)
    assert schemes == ["static"]


def test_quantized_conv_refuses_a_weight_of_another_kernel(rng):
    q = quantize(Tensor.from_data(rng.standard_normal((8, 36)).astype(np.float32)), QuantScheme.int8())
    x = Tensor.from_data(rng.standard_normal((1, 4, 5, 5)).astype(np.float32))
    with pytest.raises(ShapeError, match="not the matrix of a \\[8, 4, 3, 2\\] kernel"):
        quantized_conv(x, q, (8, 4, 3, 2))
    with pytest.raises(ShapeError, match="the input has 4 channels but the weight \\[8, 6, 3, 2\\]"):
        quantized_conv(x, q, (8, 6, 3, 2), groups=1)


# Large enough (>= 16384 column values) for flex's compiled im2col, with Cg * prod(kernel)
# a multiple of 32 (the dequantizing kernels' group): flex's own kernel runs.
NATIVE_CASES = [  # kernel_shape, input spatial, stride, padding, dilation, groups
    ((16, 32, 3, 3), (14, 13), 1, 1, 1, 1),
    ((12, 16, 2, 2), (15, 17), (2, 1), ((1, 0), (0, 2)), (1, 2), 2),
    ((8, 16, 4), (301,), 2, 3, 1, 1),
    ((8, 8, 4), (200,), 1, 0, 3, 4),
    ((6, 4, 2, 2, 2), (9, 8, 10), (1, 2, 1), 1, (2, 1, 1), 1),
]
NATIVE_SCHEMES = [
    QuantScheme.int8(),
    QuantScheme.int8(symmetric=False),
    QuantScheme.int8(level="tensor"),
    QuantScheme.int4(block=32),
    QuantScheme.int4(symmetric=False, block=32),
    QuantScheme.int8(activations="dynamic"),
]


def blocks64(x, kernel, stride, pads, dilation, groups):
    """The sliding blocks of ``x`` in float64 numpy, ``[groups, batch * positions, Cg * prod(kernel)]``
    (channel-major, then kernel tap, as PyTorch flattens a conv weight)."""
    rank = len(kernel)
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), *pads])
    span = [(k - 1) * d + 1 for k, d in zip(kernel, dilation)]
    win = np.lib.stride_tricks.sliding_window_view(xp, span, axis=tuple(range(2, 2 + rank)))
    win = win[
        (slice(None), slice(None), *(slice(None, None, s) for s in stride), *(slice(None, None, d) for d in dilation))
    ]
    n, c = x.shape[:2]
    positions = int(np.prod(win.shape[2 : 2 + rank]))
    rows = win.reshape(n, c, positions, -1).transpose(0, 2, 1, 3).reshape(n * positions, groups, -1)
    return rows.transpose(1, 0, 2), win.shape[2 : 2 + rank]


def dynamic_reference(x, q, kernel_shape, bias, stride, pads, dilation, groups):
    """Each row of sliding blocks rounded to int8 with its own scale (``max |row| / 127``,
    in float32 as the kernels compute it), times the dequantized weight, in float64."""
    rows, out = blocks64(x, kernel_shape[2:], stride, pads, dilation, groups)
    rows32 = rows.astype(np.float32)
    scale = np.maximum(np.abs(rows32).max(axis=2) / np.float32(127.0), np.float32(1e-30)).astype(np.float32)
    xq = np.clip(np.rint(rows32 / scale[..., None]), -127, 127).astype(np.float64) * scale[..., None]
    w = q.dequantize().to_numpy().astype(np.float64).reshape(groups, kernel_shape[0] // groups, -1)
    y = np.concatenate([xq[g] @ w[g].T for g in range(groups)], axis=1) + bias  # [batch * positions, out]
    n = x.shape[0]
    return y.reshape(n, -1, kernel_shape[0]).transpose(0, 2, 1).reshape(n, kernel_shape[0], *out)


@pytest.mark.parametrize("scheme", NATIVE_SCHEMES, ids=repr)
@pytest.mark.parametrize("case", NATIVE_CASES, ids=lambda c: f"k{list(c[0])}")
def test_flex_kernel_takes_the_compiled_columns_and_matches_float64(scheme, case, rng, monkeypatch):
    """flex's quantized_conv (compiled im2col, then the packed-weight GEMM) against torch's
    float64 convolution of the dequantized weight (numpy's float64 sliding blocks rounded
    to int8 per row for a dynamic scheme), and against the tensor-op path."""
    from ember.backend.flex import FlexBackend
    from ember.backend.flex.quant_kernels import quant_kernels

    kernel_shape, spatial, stride, padding, dilation, groups = case
    c_out, c_group = kernel_shape[:2]
    w = rng.standard_normal((c_out, int(np.prod(kernel_shape[1:])))).astype(np.float32)
    x = rng.standard_normal((2, c_group * groups, *spatial)).astype(np.float32)
    bias = rng.standard_normal(c_out).astype(np.float32)
    q = quantize(Tensor.from_data(w), scheme)
    rank = len(spatial)
    pads = [
        (p, p) if isinstance(p, int) else tuple(p) for p in ([padding] * rank if isinstance(padding, int) else padding)
    ]
    per_dim = [(v,) * rank if isinstance(v, int) else v for v in (stride, dilation)]
    if scheme.activations:
        expected = dynamic_reference(x, q, kernel_shape, bias, per_dim[0], pads, per_dim[1], groups)
    else:
        torch_pad = [p for lo, hi in reversed(pads) for p in (lo, hi)]
        x_padded = np.pad(x, [(0, 0), (0, 0), *pads]) if torch_pad else x
        expected = reference(x_padded, q, kernel_shape, bias, stride, 0, dilation, groups)
    taken = []
    kernel = FlexBackend.quantized_conv

    def spy(self, *args):
        y = kernel(self, *args)
        taken.append(y is not NotImplemented)
        return y

    def refuse(self):
        raise AssertionError("the quantized convolution dequantized its weight")

    monkeypatch.setattr(FlexBackend, "quantized_conv", spy)
    monkeypatch.setattr(QuantizedTensor, "dequantize", refuse)
    args = (Tensor.from_data(x), q, kernel_shape, Tensor.from_data(bias), stride, padding, dilation, groups)
    got = quantized_conv(*args).to_numpy()
    assert taken == [quant_kernels() is not None]
    monkeypatch.setattr(FlexBackend, "quantized_conv", lambda self, *a: NotImplemented)  # the composite runs
    composite = quantized_conv(*args).to_numpy()
    assert got.shape == expected.shape == composite.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=2e-4)
    np.testing.assert_allclose(got, composite, rtol=1e-5, atol=2e-4)


def test_flex_kernel_static_activations_and_unbatched_input(rng):
    """A static activation scale, and an unbatched input, through flex's kernel."""
    kernel_shape = (8, 16, 3, 3)
    w = rng.standard_normal((8, 144)).astype(np.float32)
    x = rng.standard_normal((16, 40, 30)).astype(np.float32)
    q = quantize(Tensor.from_data(w), QuantScheme.int8(activations="static"))
    scale = np.float32(np.abs(x).max() / 127)
    got = quantized_conv(
        Tensor.from_data(x), q, kernel_shape, None, 1, 1, input_scale=Tensor.from_data([scale])
    ).to_numpy()
    xq = np.clip(np.rint(x / scale), -127, 127) * scale
    expected = reference(xq[None], q, kernel_shape, None, 1, 1, 1, 1)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=2e-4)
