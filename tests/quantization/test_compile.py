"""``ember.compile`` keeps a quantized Linear packed: the graph records one
``quantized_linear`` call, which the plan runs with flex's kernel (the float weight is
never built), not the dequantize composite: for decode's few rows the plan calls the
compiled kernel itself (``ember.backend.fusion.llvm.quantized``), elsewhere it calls
flex's ``quantized_linear``."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import Device, Tensor
from ember.backend.composites import quantized as composite
from ember.backend.flex import FlexBackend
from ember.nn import LinearConfig
from ember.quantization import QuantScheme
from tests.conftest import assert_close


def refuse(*args, **kwargs):
    raise AssertionError("the dequantize composite ran: the float weight was built")


SCHEMES = [
    QuantScheme.int8(),
    QuantScheme.int8(symmetric=False),
    QuantScheme.int8(level="tensor"),
    QuantScheme.int4(),
    QuantScheme.int4(symmetric=False),
    QuantScheme.int8(activations="dynamic"),
    QuantScheme.int4(activations="dynamic"),
]


@pytest.mark.parametrize("scheme", SCHEMES, ids=repr)
@pytest.mark.parametrize("d_input", [64, 128])
def test_a_compiled_quantized_linear_calls_the_kernel(scheme, d_input, rng, monkeypatch):
    flex = Device.flex()
    layer = LinearConfig(d_input, 24).init(flex).quantized(scheme)
    calls = []
    kernel = FlexBackend.quantized_linear

    def counted(self, *args, **kwargs):
        calls.append(args[-1])
        return kernel(self, *args, **kwargs)

    @ember.compile
    def step(layer, x):
        return layer(x).relu()

    x = rng.standard_normal((1, 3, d_input)).astype(np.float32)
    expected = layer(Tensor.from_data(x, device=flex)).relu()
    monkeypatch.setattr(FlexBackend, "quantized_linear", counted)
    monkeypatch.setattr(composite, "dequantize", refuse)
    for _ in range(3):
        got = step(layer, Tensor.from_data(x, device=flex))
        np.testing.assert_array_equal(got.to_numpy(), expected.to_numpy())  # flex's kernels, flex's bits
    # The first run replays the graph through flex; then the plan runs. Its own step calls
    # the compiled kernel for weight-only schemes with a scale per row or block and for
    # int4 x dynamic int8 where K is a multiple of 128; elsewhere (int8 x int8, one scale
    # per tensor) it calls flex's quantized_linear each run.
    in_plan = scheme.level != "tensor" and (
        scheme.activations is None or (scheme.value == "int4" and d_input % 128 == 0)
    )
    assert len(calls) == (1 if in_plan else 3)
    assert step.stats["traces"] == 1


def float64_digits_forward(model, x: np.ndarray) -> np.ndarray:
    """The digits CNN's forward in float64 torch, from each layer's dequantized weight."""
    torch = pytest.importorskip("torch")
    f = torch.nn.functional

    def weight(layer):
        w = layer.float_weight() if hasattr(layer, "float_weight") else layer.weight.dequantize()
        return torch.from_numpy(w.to_numpy().astype(np.float64))

    def bias(layer):
        return torch.from_numpy(layer.bias.val().to_numpy().astype(np.float64))

    h = torch.from_numpy(x.astype(np.float64))
    h = f.relu(f.conv2d(h, weight(model.conv1), bias(model.conv1), padding=1))
    h = f.max_pool2d(f.relu(f.conv2d(h, weight(model.conv2), bias(model.conv2), padding=1)), 2)
    h = f.relu(f.linear(h.flatten(1), weight(model.fc1), bias(model.fc1)))
    return f.linear(h, weight(model.fc2), bias(model.fc2)).numpy()


@pytest.mark.parametrize(
    "scheme",
    [QuantScheme.int8(), QuantScheme.int8(symmetric=False), QuantScheme.int8(activations="dynamic")],
    ids=repr,
)
def test_a_compiled_quantized_cnn_calls_the_conv_kernel_and_never_builds_a_float_weight(scheme, rng, monkeypatch):
    """The digits CNN quantized: its convolutions are one ``quantized_conv`` library call
    each in the compiled graph (no sliding blocks), the plan runs flex's kernels with every
    dequantization patched to raise, and the values match eager and float64."""
    from ember.backend.composites import quantized as composites
    from ember.backend.flex import quantized as flex_quantized
    from ember.quantization import QuantizedTensor
    from tests.quantization.test_accuracy import load_example

    flex = Device.flex()
    flex.seed(0)
    model = load_example("classify_digits").DigitsCnn.new(flex).quantize(scheme)
    x = rng.random((16, 1, 8, 8), dtype=np.float32)
    expected = model(Tensor.from_data(x, device=flex)).to_numpy()
    if not scheme.activations:  # a dynamic scheme rounds the activations: eager is its oracle
        assert_close(expected, float64_digits_forward(model, x), rtol=1e-4, atol=1e-5)

    def refuse(*args, **kwargs):
        raise AssertionError("a quantized layer dequantized its weight")

    monkeypatch.setattr(QuantizedTensor, "dequantize", refuse)
    monkeypatch.setattr(composites, "dequantize", refuse)
    monkeypatch.setattr(flex_quantized, "dequantize_array", refuse)
    calls = []
    kernel = FlexBackend.quantized_conv

    def counted(self, *args, **kwargs):
        y = kernel(self, *args, **kwargs)
        calls.append(y is not NotImplemented)
        return y

    monkeypatch.setattr(FlexBackend, "quantized_conv", counted)
    forward = ember.compile(lambda m, images: m(images))
    for _ in range(3):
        got = forward(model, Tensor.from_data(x, device=flex))
        assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert forward.stats["traces"] == 1
    ops = [node.op for entry in forward._entries.values() for node in entry.graph.nodes]
    assert ops.count("quantized_conv") == 2 and ops.count("quantized_linear") == 2
    assert "slice" not in ops and "cat" not in ops  # no sliding blocks
    assert calls and all(calls)  # flex's kernel ran each convolution


@pytest.mark.parametrize("scheme", [QuantScheme.int8(), QuantScheme.int8(activations="dynamic")], ids=repr)
def test_a_bucketed_quantized_cnn_matches_eager_per_batch_size(scheme, rng):
    """Shape buckets pass a quantized convolution (per sample: padded samples never reach
    the real ones, the dynamic scheme's scales included): batches 3, 5 and 7 in the buckets
    4 and 8 against eager."""
    from tests.quantization.test_accuracy import load_example

    flex = Device.flex()
    flex.seed(0)
    model = load_example("classify_digits").DigitsCnn.new(flex).quantize(scheme)
    forward = ember.compile(lambda m, images: m(images), buckets={"images": 0})
    for batch in (3, 5, 7):
        x = Tensor.from_data(rng.random((batch, 1, 8, 8), dtype=np.float32), device=flex)
        assert_close(forward(model, x), model(x).to_numpy(), rtol=1e-5, atol=1e-5)
    assert forward.cache_info()["traces"] == 2
