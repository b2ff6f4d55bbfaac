"""QuantScheme and QuantizedTensor: packing, scales, dequantization on every device,
and the errors for bad input. The oracle is the quantization formula in float64 numpy."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Tensor
from ember.errors import ConfigError, ShapeError, ValueRangeError
from ember.quantization import QuantizedTensor, QuantScheme, quantize

SCHEMES = [
    QuantScheme.int8(),
    QuantScheme.int8(symmetric=False),
    QuantScheme.int8(level="tensor"),
    QuantScheme.int8(block=32),
    QuantScheme.int4(),
    QuantScheme.int4(block=16, symmetric=False),
    QuantScheme.int4(block=None),
]


def reference(w: np.ndarray, scheme: QuantScheme) -> np.ndarray:
    """Quantize-dequantize in float64 by the formula, group by group."""
    rows, cols = w.shape
    g = scheme.block if scheme.level == "block" else cols
    out = np.empty_like(w, dtype=np.float64)
    whole = w.astype(np.float64)
    for r in range(rows):
        for start in range(0, cols, g):
            part = whole[r, start : start + g]
            src = whole if scheme.level == "tensor" else part
            lo, hi = src.min(), src.max()
            if scheme.symmetric:
                amax = max(abs(lo), abs(hi))
                # int4 (not per tensor): the scale amax / d of least squared error
                divisors = (7.0, 7.25, 7.5, 7.75, 8.0, 8.5, 9.0) if scheme.value == "int4" else (scheme.qmax,)
                if scheme.level == "tensor":
                    divisors = (scheme.qmax,)
                best = None
                for d in divisors:
                    scale = float(np.float32(amax / d))
                    value = np.clip(np.rint(part / scale), scheme.qmin, scheme.qmax) * scale
                    err = ((value - part) ** 2).sum()
                    if best is None or err < best[0]:
                        best = (err, value)
                out[r, start : start + g] = best[1]
            else:
                lo, hi = min(lo, 0.0), max(hi, 0.0)
                scale = np.float32((hi - lo) / (scheme.qmax - scheme.qmin))
                zero = np.clip(np.rint(scheme.qmin - lo / float(scale)), scheme.qmin, scheme.qmax)
                q = np.clip(np.rint(part / float(scale)) + zero, scheme.qmin, scheme.qmax)
                out[r, start : start + g] = (q - zero) * float(scale)
    return out


@pytest.mark.parametrize("scheme", SCHEMES, ids=repr)
def test_dequantize_matches_the_formula_and_stays_within_half_a_step(scheme, rng):
    w = rng.standard_normal((6, 64)).astype(np.float32)
    q = quantize(Tensor.from_data(w), scheme)
    got = q.dequantize().to_numpy()
    np.testing.assert_allclose(got, reference(w, scheme), rtol=1e-6, atol=1e-6)
    step = q.scales.to_numpy().max()
    if scheme.value == "int8":  # int4 may clip a block's largest value when that lowers the block's error
        assert np.abs(got - w).max() <= 0.5 * step * (1 + 1e-5)
    assert q.dims() == [6, 64] and q.shape == Tensor.zeros([6, 64]).shape
    assert q.dtype == "q" + scheme.value


def test_int4_is_packed_two_per_byte(rng):
    w = rng.standard_normal((4, 64)).astype(np.float32)
    q = quantize(Tensor.from_data(w), QuantScheme.int4(block=32))
    values = q.values.to_numpy()
    assert values.dtype == np.uint8 and values.shape == (4, 32)
    assert q.scales.dims() == [4, 2]
    # byte j of a block holds value j (low nibble) and value j + 16 (high nibble), offset 8
    s = q.scales.to_numpy()[0, 0]
    expect_lo = np.clip(np.rint(w[0, :16] / s), -8, 7) + 8
    expect_hi = np.clip(np.rint(w[0, 16:32] / s), -8, 7) + 8
    np.testing.assert_array_equal(values[0, :16] & 15, expect_lo)
    np.testing.assert_array_equal(values[0, :16] >> 4, expect_hi)
    assert q.nbytes() == 4 * 32 + 4 * 2 * 4
    int8 = quantize(Tensor.from_data(w), QuantScheme.int8())
    assert int8.values.to_numpy().dtype == np.int8 and int8.nbytes() == 4 * 64 + 4 * 4


def test_dequantize_on_every_device(device, rng):
    w = rng.standard_normal((8, 64)).astype(np.float32)
    for scheme in (QuantScheme.int8(symmetric=False), QuantScheme.int4()):
        q = quantize(Tensor.from_data(w), scheme)
        moved = q.to_device(device)
        assert moved.device == device
        np.testing.assert_allclose(moved.dequantize().to_numpy(), q.dequantize().to_numpy(), rtol=1e-6, atol=1e-6)


def test_scheme_json_round_trip_and_repr():
    for scheme in SCHEMES + [QuantScheme.int8(activations="dynamic")]:
        assert QuantScheme.from_json(scheme.to_json()) == scheme
    assert repr(QuantScheme.int4()) == "QuantScheme(int4, symmetric, block(32))"
    with pytest.raises(ConfigError, match="not a saved scheme"):
        QuantScheme.from_json("{}")


def test_bad_schemes_and_inputs_raise_ember_errors(rng):
    with pytest.raises(ConfigError, match="value must be"):
        QuantScheme("int3")
    with pytest.raises(ConfigError, match="even"):
        QuantScheme.int4(block=15)
    with pytest.raises(ConfigError, match="symmetric weights"):
        QuantScheme.int4(symmetric=False, activations="dynamic")
    with pytest.raises(ConfigError, match="symmetric weights"):
        QuantScheme.int8(block=32, activations="dynamic")
    with pytest.raises(ShapeError, match="block size 32 does not divide the last dimension \\(48\\)"):
        quantize(Tensor.from_data(rng.standard_normal((2, 48)).astype(np.float32)), QuantScheme.int4(block=32))
    with pytest.raises(ShapeError, match="must be even"):
        quantize(Tensor.from_data(np.ones((2, 5), np.float32)), QuantScheme.int4(block=None))
    w = np.ones((2, 32), np.float32)
    w[1, 3] = np.nan
    with pytest.raises(ValueRangeError, match=r"NaN or inf \(first at index \[1, 3\]\)"):
        quantize(Tensor.from_data(w), QuantScheme.int8())
    with pytest.raises(TypeError, match="only float tensors"):
        quantize(Tensor.from_data(np.ones((2, 4), np.int32)), QuantScheme.int8())
    q = quantize(Tensor.from_data(np.ones((2, 32), np.float32)), QuantScheme.int8())
    with pytest.raises(ShapeError, match="needs float scales of shape \\[2, 1\\]"):
        QuantizedTensor(q.values, Tensor.from_data(np.ones((3, 1), np.float32)), None, q.scheme, (2, 32))


def test_all_zero_rows_quantize_to_zero():
    q = quantize(Tensor.zeros([3, 32]), QuantScheme.int4(symmetric=False))
    assert np.all(q.dequantize().to_numpy() == 0.0)
