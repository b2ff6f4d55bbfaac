"""``ember.compile`` keeps a quantized Linear packed: the graph records one
``quantized_linear`` call, which the plan runs with flex's kernel (the float weight is
never built), not the dequantize composite."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import Device, Tensor
from ember.backend.flex import FlexBackend
from ember.nn import LinearConfig
from ember.quantization import QuantScheme
from tests.conftest import assert_close


@pytest.mark.parametrize("scheme", [QuantScheme.int8(), QuantScheme.int4(), QuantScheme.int8(activations="dynamic")])
def test_a_compiled_quantized_linear_calls_the_kernel(scheme, rng, monkeypatch):
    flex = Device.flex()
    layer = LinearConfig(64, 24).init(flex).quantized(scheme)
    calls = []
    kernel = FlexBackend.quantized_linear

    def counted(self, *args):
        calls.append(args[-1])
        return kernel(self, *args)

    @ember.compile
    def step(layer, x):
        return layer(x).relu()

    x = rng.standard_normal((1, 3, 64)).astype(np.float32)
    expected = layer(Tensor.from_data(x, device=flex)).relu()
    monkeypatch.setattr(FlexBackend, "quantized_linear", counted)
    for _ in range(2):
        got = step(layer, Tensor.from_data(x, device=flex))
        assert_close(got, expected.to_numpy(), atol=1e-5)
    assert len(calls) == 2  # once per run: the packed weight reached the kernel
    assert step.stats["traces"] == 1
