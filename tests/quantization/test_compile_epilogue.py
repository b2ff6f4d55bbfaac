"""The elementwise epilogue after a quantized product in a compiled plan: a ReLU that
reads the product alone is folded into the call (``activation="relu"``: flex's kernels
apply it to each output block right after the product, with the bias), and any other
epilogue (GELU, SiLU, a residual add) is one compiled kernel after the call. Values
against eager and against float64 of the dequantized weights; the kernels' ReLU against
their own output without it."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember
from ember import Device, Tensor
from ember.backend.flex import FlexBackend
from ember.backend.flex.quantized import quantized_linear as flex_linear
from ember.nn import Conv2dConfig, LinearConfig
from ember.quantization import QuantScheme
from ember.tensor.activation import gelu, silu
from tests.conftest import assert_close

_ERF = np.vectorize(math.erf)

EPILOGUES = {  # name -> (ember's epilogue, its float64 oracle); r: a residual of the output's shape
    "relu": (lambda y, r: y.relu(), lambda y, r: np.maximum(y, 0.0)),
    "residual-relu": (lambda y, r: (y + r).relu(), lambda y, r: np.maximum(y + r, 0.0)),
    "relu-residual": (lambda y, r: y.relu() + r, lambda y, r: np.maximum(y, 0.0) + r),
    "gelu": (lambda y, r: gelu(y), lambda y, r: 0.5 * y * (1.0 + _ERF(y / math.sqrt(2.0)))),
    "silu": (lambda y, r: silu(y), lambda y, r: y / (1.0 + np.exp(-y))),
}


def spy_activations(monkeypatch, op: str) -> list[str]:
    """The ``activation`` each call of flex's ``op`` kernel got (``""``: none)."""
    seen: list[str] = []
    kernel = getattr(FlexBackend, op)

    def spy(self, *args, **kwargs):
        seen.append(kwargs.get("activation", ""))
        return kernel(self, *args, **kwargs)

    monkeypatch.setattr(FlexBackend, op, spy)
    return seen


def planned_activation(step, op: str) -> str:
    """The ``activation`` the compiled plan's ``op`` step takes (``""``: none), whether the
    plan calls flex's kernel or runs its own lowering (decode's few rows: a Library step,
    fusion/llvm/quantized.py)."""
    (entry,) = step._entries.values()
    (node,) = [s.node for s in entry.plan.schedule.steps if getattr(s, "node", None) is not None and s.node.op == op]
    return dict(node.kwargs).get("activation", "")


@pytest.mark.parametrize("rows", [3, 40])  # the register-tiled kernels; the dequantized tiles
@pytest.mark.parametrize("epilogue", sorted(EPILOGUES))
@pytest.mark.parametrize("scheme", [QuantScheme.int8(), QuantScheme.int4(), QuantScheme.int8(activations="dynamic")])
def test_a_compiled_quantized_linear_with_its_epilogue(scheme, epilogue, rows, rng, monkeypatch):
    flex = Device.flex()
    layer = LinearConfig(64, 48).init(flex).quantized(scheme)
    fn, oracle = EPILOGUES[epilogue]
    x = rng.standard_normal((rows, 64)).astype(np.float32)
    r = rng.standard_normal((rows, 48)).astype(np.float32)
    eager = fn(layer(Tensor.from_data(x, device=flex)), Tensor.from_data(r, device=flex)).to_numpy()
    if not scheme.activations:
        w = layer.weight.dequantize().to_numpy().astype(np.float64)
        y = x.astype(np.float64) @ w.T + layer.bias.val().to_numpy().astype(np.float64)
        assert_close(eager, oracle(y, r.astype(np.float64)), rtol=1e-4, atol=1e-5)
    seen = spy_activations(monkeypatch, "quantized_linear")
    step = ember.compile(lambda layer, x, r: fn(layer(x), r))
    for _ in range(2):
        got = step(layer, Tensor.from_data(x, device=flex), Tensor.from_data(r, device=flex))
        assert_close(got, eager, rtol=1e-6, atol=1e-6)
    # The first call replays the graph op by op; the plan's call takes a ReLU that reads
    # the product alone, not one that reads a sum.
    assert planned_activation(step, "quantized_linear") == ("relu" if epilogue in ("relu", "relu-residual") else "")
    if rows == 40:  # past decode's few rows the plan calls flex's kernel, with the activation
        assert seen[-1] == planned_activation(step, "quantized_linear")


@pytest.mark.parametrize("epilogue", ["relu", "residual-relu", "silu"])
@pytest.mark.parametrize("batch, size", [(2, 20), (16, 6)])  # one product per sample; several samples per product
@pytest.mark.parametrize("scheme", [QuantScheme.int8(), QuantScheme.int8(activations="dynamic")], ids=repr)
def test_a_compiled_quantized_conv_with_its_epilogue(scheme, batch, size, epilogue, rng, monkeypatch):
    torch = pytest.importorskip("torch")
    flex = Device.flex()
    conv = Conv2dConfig((32, 24), 3, padding=1).init(flex).quantized(scheme)
    fn, oracle = EPILOGUES[epilogue]
    x = rng.standard_normal((batch, 32, size, size)).astype(np.float32)
    r = rng.standard_normal((batch, 24, size, size)).astype(np.float32)
    eager = fn(conv(Tensor.from_data(x, device=flex)), Tensor.from_data(r, device=flex)).to_numpy()
    if not scheme.activations:
        w = torch.from_numpy(conv.float_weight().to_numpy().astype(np.float64))
        b = torch.from_numpy(conv.bias.val().to_numpy().astype(np.float64))
        y = torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float64)), w, b, padding=1).numpy()
        assert_close(eager, oracle(y, r.astype(np.float64)), rtol=1e-4, atol=1e-4)
    seen = spy_activations(monkeypatch, "quantized_conv")
    step = ember.compile(lambda conv, x, r: fn(conv(x), r))
    for _ in range(2):
        got = step(conv, Tensor.from_data(x, device=flex), Tensor.from_data(r, device=flex))
        assert_close(got, eager, rtol=1e-6, atol=1e-6)
    assert seen[-1] == ("relu" if epilogue == "relu" else "")


@pytest.mark.parametrize("rows", [1, 5, 40])
@pytest.mark.parametrize("scheme", [QuantScheme.int8(), QuantScheme.int4(), QuantScheme.int8(activations="dynamic")])
def test_the_kernels_relu_is_their_output_clamped_at_zero(scheme, rows, rng):
    """flex's kernels with ``activation="relu"``: bit for bit ``max(y, 0)`` of their own
    output, NaN kept (a NaN input row)."""
    flex = Device.flex()
    layer = LinearConfig(128, 80).init(flex).quantized(scheme)
    q = layer.weight
    x = rng.standard_normal((rows, 128)).astype(np.float32)
    if not scheme.activations:
        x[-1, 3] = np.nan
    args = (
        x,
        q.values.to_numpy(),
        q.scales.to_numpy(),
        None if q.zero_points is None else q.zero_points.to_numpy(),
        layer.bias.val().to_numpy(),
        None,
        scheme.value,
        q.group,
        scheme.activations or "",
    )
    plain = flex_linear(*args)
    got = flex_linear(*args, activation="relu")
    np.testing.assert_array_equal(got, np.where(plain <= 0, np.float32(0.0), plain))
    with pytest.raises(ValueError, match="unknown activation"):
        flex_linear(*args, activation="tanh")
