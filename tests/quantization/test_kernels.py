"""flex's quantized kernels against a float64 reference computed from the dequantized
weights: weight-only int8/uint8/int4 (both row tiles: M not a multiple of 4, N not a
multiple of the cache block), and the dynamic int8 x int8 GEMM on its VNNI and its
portable path."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Tensor
from ember.backend.flex.quant_kernels import has_vnni, quant_kernels
from ember.backend.flex.quantized import dequantize_array, quantize_rows_int8, quantized_linear
from ember.quantization import QuantScheme, quantize

WEIGHT_ONLY = [
    QuantScheme.int8(),
    QuantScheme.int8(symmetric=False),
    QuantScheme.int8(level="tensor"),
    QuantScheme.int8(block=64),
    QuantScheme.int4(),
    QuantScheme.int4(symmetric=False),
    QuantScheme.int4(block=None),
]

needs_kernels = pytest.mark.skipif(quant_kernels() is None, reason="llvmlite cannot compile for this host")


def parts(w: np.ndarray, scheme: QuantScheme):
    q = quantize(Tensor.from_data(w), scheme)
    zp = q.zero_points
    return q, q.values.to_numpy(), q.scales.to_numpy(), None if zp is None else zp.to_numpy()


def check_weight_only(scheme, m, rng, path=None):
    n, k = 70, 256  # 70 rows: one full cache block and a partial one
    w = rng.standard_normal((n, k)).astype(np.float32)
    x = rng.standard_normal((m, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    q, values, scales, zps = parts(w, scheme)
    expected = x.astype(np.float64) @ q.dequantize().to_numpy().astype(np.float64).T + bias
    got = quantized_linear(x, values, scales, zps, bias, None, scheme.value, q.group, "", path=path)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=2e-5 * np.sqrt(k))
    nobias = quantized_linear(x, values, scales, zps, None, None, scheme.value, q.group, "", path=path)
    np.testing.assert_allclose(nobias, expected - bias, rtol=1e-5, atol=2e-5 * np.sqrt(k))


@needs_kernels
@pytest.mark.parametrize("scheme", WEIGHT_ONLY, ids=repr)
@pytest.mark.parametrize("m", [1, 6, 40])  # 40 rows: the dequantized tile and sgemm
def test_weight_only_kernel_matches_float64_of_the_dequantized_weight(scheme, m, rng):
    check_weight_only(scheme, m, rng)


@needs_kernels
@pytest.mark.slow  # compiles the portable module (~10 s)
@pytest.mark.parametrize("scheme", WEIGHT_ONLY, ids=repr)
def test_portable_weight_only_kernels_match_float64(scheme, rng):
    """The kernels of a CPU without AVX-512 (int4 unpacked by mask and shift, not
    looked up), compiled here on request."""
    for m in (1, 6):
        check_weight_only(scheme, m, rng, path="portable")


def test_numpy_reference_path_and_small_groups(rng):
    """Groups that are not a multiple of 32 run the numpy reference (the same function)."""
    w = rng.standard_normal((5, 48)).astype(np.float32)
    x = rng.standard_normal((3, 48)).astype(np.float32)
    scheme = QuantScheme.int4(block=16)
    q, values, scales, zps = parts(w, scheme)
    expected = x.astype(np.float64) @ q.dequantize().to_numpy().astype(np.float64).T
    for path in (None, "numpy"):
        got = quantized_linear(x, values, scales, zps, None, None, "int4", 16, "", path=path)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dequantize_array(values, scales, zps, "int4", 16), q.dequantize().to_numpy())


PATHS = ["portable", "numpy", pytest.param("vnni", marks=pytest.mark.skipif(not has_vnni(), reason="no AVX-512 VNNI"))]


@needs_kernels
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("m", [1, 7])
def test_dynamic_int8_gemm_is_exact_in_int32(path, m, rng):
    n, k = 67, 320
    w = rng.standard_normal((n, k)).astype(np.float32)
    x = (rng.standard_normal((m, k)) * 3).astype(np.float32)
    x[0, 5] = 40.0  # an outlier sets that row's scale
    bias = rng.standard_normal(n).astype(np.float32)
    q, values, scales, _ = parts(w, QuantScheme.int8(activations="dynamic"))
    xq, sx = quantize_rows_int8(x, None)
    assert xq.dtype == np.int8 and np.abs(xq).max() == 127
    acc = xq.astype(np.int64) @ values.astype(np.int64).T  # the exact integer products
    expected = acc * sx[:, None].astype(np.float64) * scales.reshape(-1).astype(np.float64) + bias
    got = quantized_linear(x, values, scales, None, bias, None, "int8", k, "dynamic", path=path)
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-5)
    # the float64 reference of the dequantized weight with fake-quantized activations
    fake = (xq.astype(np.float64) * sx[:, None]) @ q.dequantize().to_numpy().astype(np.float64).T + bias
    np.testing.assert_allclose(got, fake, rtol=1e-5, atol=1e-4)


@needs_kernels
@pytest.mark.parametrize("path", PATHS)
def test_static_int8_gemm_uses_the_calibrated_scale(path, rng):
    n, k = 16, 128
    w = rng.standard_normal((n, k)).astype(np.float32)
    x = rng.standard_normal((5, k)).astype(np.float32)
    _, values, scales, _ = parts(w, QuantScheme.int8(activations="static"))
    scale = np.array([0.02], np.float32)
    xq = np.clip(np.rint(x / scale[0]), -127, 127)
    expected = (xq @ values.astype(np.float64).T) * float(scale[0]) * scales.reshape(-1)
    got = quantized_linear(x, values, scales, None, None, scale, "int8", k, "static", path=path)
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-5)


def test_a_path_this_cpu_lacks_is_an_ember_error(rng):
    from ember.errors import BackendUnavailableError

    x = rng.standard_normal((2, 100)).astype(np.float32)  # K = 100: no int8 x int8 kernel
    values = np.ones((3, 100), np.int8)
    with pytest.raises(BackendUnavailableError, match="no compiled 'portable' kernel"):
        quantized_linear(x, values, np.ones((3, 1), np.float32), None, None, None, "int8", 100, "dynamic", "portable")


@needs_kernels
@pytest.mark.parametrize("static", [None, 0.02])
def test_compiled_row_quantization_is_numpys_bit_for_bit(static, rng):
    """The in-kernel activation quantization (max |x|, true division, half-to-even
    rounding, clamp, row sums) against :func:`quantize_rows_int8`."""
    import ctypes

    from ember.backend.flex.native import address

    m, k = 9, 192
    x = (rng.standard_normal((m, k)) * 2).astype(np.float32)
    x[1] = 0.0  # an all-zero row: the 1e-30 floor
    x[2, :4] = [0.5, 1.5, -2.5, 127.0]  # ties round to even once scaled by 1
    x[2, 4:] = 0.0
    scale = None if static is None else np.array([static], np.float32)
    want_q, want_s = quantize_rows_int8(x, scale)
    xq, sx, xsum = np.empty((m, k), np.int8), np.empty(m, np.float32), np.empty(m, np.int32)
    kernels = quant_kernels()
    kernels.quantize_rows(address(x), address(xq), address(sx), address(xsum), m, k, ctypes.c_float(static or 0.0))
    np.testing.assert_array_equal(xq, want_q)
    np.testing.assert_array_equal(sx, want_s)
    np.testing.assert_array_equal(xsum, want_q.sum(axis=1, dtype=np.int32))


@needs_kernels
@pytest.mark.parametrize("k", [16, 48, 112, 208])
def test_row_quantization_finds_the_largest_value_in_every_chain(k, rng):
    """``max |x|`` runs in several chains of 16 lanes and a tail: the largest value in any
    of them (and a NaN in the tail) sets the row's scale, as :func:`quantize_rows_int8`."""
    import ctypes

    from ember.backend.flex.native import address

    m = k // 16 + 1
    x = rng.uniform(-1.0, 1.0, (m, k)).astype(np.float32)
    for row in range(k // 16):
        x[row, 16 * row + row % 16] = -40.0 - row  # the largest, in the row's own vector of 16
    x[-1, -1] = np.nan  # in the last vector: the tail on every k here
    with np.errstate(invalid="ignore"):  # the NaN row's values cast to int8
        want_q, want_s = quantize_rows_int8(x, None)
    xq, sx, xsum = np.empty((m, k), np.int8), np.empty(m, np.float32), np.empty(m, np.int32)
    quant_kernels().quantize_rows(address(x), address(xq), address(sx), address(xsum), m, k, ctypes.c_float(0.0))
    assert np.isnan(sx[-1]) and np.isnan(want_s[-1])
    np.testing.assert_array_equal(xq[:-1], want_q[:-1])
    np.testing.assert_array_equal(sx, want_s)
    np.testing.assert_array_equal(sx[:-1], (40.0 + np.arange(m - 1, dtype=np.float32)) / np.float32(127.0))
    np.testing.assert_array_equal(xsum[:-1], want_q[:-1].sum(axis=1, dtype=np.int32))


@needs_kernels
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("m", [6, 13])  # whole register tiles of rows, and rows padded to them
def test_dynamic_int8_gemm_on_padded_row_tiles(path, m, rng):
    n, k = 9, 128  # 9 columns: the 6 x 4 tile and the 6 x 1 tile on the rest
    w = rng.standard_normal((n, k)).astype(np.float32)
    x = rng.standard_normal((m, k)).astype(np.float32)
    q, values, scales, _ = parts(w, QuantScheme.int8(activations="dynamic"))
    xq, sx = quantize_rows_int8(x, None)
    expected = (xq.astype(np.int64) @ values.astype(np.int64).T) * sx[:, None].astype(np.float64)
    expected = expected * scales.reshape(-1).astype(np.float64)
    got = quantized_linear(x, values, scales, None, None, None, "int8", k, "dynamic", path=path)
    assert got.shape == (m, n)
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-5)


@needs_kernels
def test_a_nan_input_row_gives_nan_outputs(rng):
    w = rng.standard_normal((4, 64)).astype(np.float32)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    x[1, 3] = np.nan
    _, values, scales, _ = parts(w, QuantScheme.int8(activations="dynamic"))
    got = quantized_linear(x, values, scales, None, None, None, "int8", 64, "dynamic")
    assert np.isfinite(got[0]).all() and np.isnan(got[1]).all()


@pytest.mark.parametrize(
    "scheme", [QuantScheme.int4(), QuantScheme.int8(symmetric=False), QuantScheme.int8(activations="dynamic")], ids=repr
)
def test_the_composite_over_the_protocol_matches_the_kernels(scheme, rng):
    """``ember.backend.composites.quantized`` (what devices without a kernel run), over
    flex's primitive ops, against flex's kernel and the float64 reference."""
    from ember.backend.composites import COMPOSITES
    from ember.backend.flex import FlexBackend

    w = rng.standard_normal((12, 64)).astype(np.float32)
    x = rng.standard_normal((2, 3, 64)).astype(np.float32)
    bias = rng.standard_normal(12).astype(np.float32)
    q, values, scales, zps = parts(w, scheme)
    act = scheme.activations or ""
    got = COMPOSITES["quantized_linear"](FlexBackend(), x, values, scales, zps, bias, None, scheme.value, q.group, act)
    kernel = quantized_linear(x, values, scales, zps, bias, None, scheme.value, q.group, act)
    xs = x.reshape(-1, 64)
    if act:
        xq, sx = quantize_rows_int8(xs, None)
        xs = xq.astype(np.float64) * sx[:, None]
    expected = xs.astype(np.float64) @ q.dequantize().to_numpy().astype(np.float64).T + bias
    np.testing.assert_allclose(got.reshape(-1, 12), expected, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got, kernel, rtol=1e-5, atol=1e-4)
