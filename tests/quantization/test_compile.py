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

    def counted(self, *args):
        calls.append(args[-1])
        return kernel(self, *args)

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
