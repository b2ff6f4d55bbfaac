"""flex's packed dynamic int8 GEMM (VNNI panels of 16 columns) against the exact integer
products in int64 and the float64 product of the dequantized weight; the layout of the
packed weight against its definition, element by element; the cache of packed weights."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from ember.backend.flex import quantized as flex_quantized
from ember.backend.flex.quant_kernels import has_vnni, quant_kernels
from ember.backend.flex.quant_packed import pack_int8
from ember.backend.flex.quantized import quantize_rows_int8, quantized_linear
from ember.errors import BackendUnavailableError

needs_packed = pytest.mark.skipif(
    quant_kernels() is None or not quant_kernels().packed, reason="no AVX-512 VNNI (the packed kernel's CPU)"
)


def weights(n: int, k: int, rng) -> tuple[np.ndarray, np.ndarray]:
    values = rng.integers(-127, 128, (n, k)).astype(np.int8)
    values[0, :] = 127  # the extremes: w + 128 is 255 and 1
    values[-1, :] = -127
    return values, (rng.random((n, 1)) * 0.01 + 0.001).astype(np.float32)


def exact(x, values, scales, bias):
    xq, sx = quantize_rows_int8(x, None)
    acc = xq.astype(np.int64) @ values.astype(np.int64).T
    out = acc * sx[:, None].astype(np.float64) * scales.reshape(-1).astype(np.float64)
    return out if bias is None else out + bias


def test_packed_layout_is_its_definition(rng):
    n, k = 32, 12
    w = rng.integers(-128, 128, (n, k)).astype(np.int8)
    packed = pack_int8(w)
    assert packed.shape == (n // 16, k // 4, 16, 4) and packed.dtype == np.uint8
    for row in range(n):
        for col in range(k):
            assert int(packed[row // 16, col // 4, row % 16, col % 4]) == int(w[row, col]) + 128


@needs_packed
@pytest.mark.parametrize(
    ("m", "n", "k", "with_bias"),
    [(1, 16, 64, True), (7, 80, 320, True), (13, 128, 192, False), (4, 64, 128, True), (9, 144, 64, False)],
)
def test_packed_gemm_is_exact_in_int32(m, n, k, with_bias, rng):
    """M not a multiple of the register tile (padded rows), N with a one-panel tail."""
    values, scales = weights(n, k, rng)
    x = (rng.standard_normal((m, k)) * 3).astype(np.float32)
    x[0, 3] = 50.0  # an outlier sets that row's scale
    bias = rng.standard_normal(n).astype(np.float32) if with_bias else None
    got = quantized_linear(x, values, scales, None, bias, None, "int8", k, "dynamic", path="packed")
    assert got.shape == (m, n) and got.dtype == np.float32
    np.testing.assert_allclose(got, exact(x, values, scales, bias), rtol=2e-6, atol=1e-5)
    # the numpy reference path: the same function of the same int8 operands
    reference = quantized_linear(x, values, scales, None, bias, None, "int8", k, "dynamic", path="numpy")
    np.testing.assert_allclose(got, reference, rtol=2e-6, atol=1e-5)


@needs_packed
def test_packed_gemm_over_blocks_of_k(rng, monkeypatch):
    """K longer than the kernel's block: the int32 sums wait in the output between blocks."""
    monkeypatch.setattr(flex_quantized, "PACKED_KC", 64)
    m, n, k = 6, 80, 256
    values, scales = weights(n, k, rng)
    x = rng.standard_normal((m, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    got = quantized_linear(x, values, scales, None, bias, None, "int8", k, "dynamic", path="packed")
    np.testing.assert_allclose(got, exact(x, values, scales, bias), rtol=2e-6, atol=1e-5)


@needs_packed
@pytest.mark.parametrize(("m", "kc"), [(32, None), (61, 64), (130, 128)])
def test_packed_gemm_from_the_prefetching_row_count_on(m, kc, rng, monkeypatch):
    """From 32 rows on, the row tiles of a block prefetch the next block (the same tile's
    next block of k, the next tile's first, none after the last): values as without."""
    if kc is not None:
        monkeypatch.setattr(flex_quantized, "PACKED_KC", kc)
    n, k = 144, 256  # two tiles of 4 panels and a one-panel tail
    values, scales = weights(n, k, rng)
    x = (rng.standard_normal((m, k)) * 2).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    got = quantized_linear(x, values, scales, None, bias, None, "int8", k, "dynamic", path="packed")
    xq, sx = quantize_rows_int8(x, None)
    acc = xq.astype(np.int64) @ values.astype(np.int64).T  # the exact integer products
    expected = acc * sx[:, None].astype(np.float64) * scales.reshape(-1).astype(np.float64) + bias
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-5)
    below = quantized_linear(x[:16], values, scales, None, bias, None, "int8", k, "dynamic", path="packed")
    np.testing.assert_array_equal(got[:16], below)  # 16 rows: no prefetch, the same values


@needs_packed
def test_packed_static_scale(rng):
    n, k = 32, 128
    values, scales = weights(n, k, rng)
    x = rng.standard_normal((5, k)).astype(np.float32)
    scale = np.array([0.02], np.float32)
    xq = np.clip(np.rint(x / scale[0]), -127, 127)
    expected = (xq @ values.astype(np.float64).T) * float(scale[0]) * scales.reshape(-1)
    got = quantized_linear(x, values, scales, None, None, scale, "int8", k, "static", path="packed")
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-5)


@needs_packed
def test_the_default_path_packs_each_weight_once_from_a_tile_of_rows(rng):
    n, k = 64, 128
    values, scales = weights(n, k, rng)
    rows = flex_quantized.PACKED_ROWS
    quantized_linear(
        rng.standard_normal((rows - 1, k)).astype(np.float32), values, scales, None, None, None, "int8", k, "dynamic"
    )
    assert (id(values), None) not in flex_quantized._PACKED  # fewer rows: the unpacked kernels
    x = rng.standard_normal((rows, k)).astype(np.float32)
    got = quantized_linear(x, values, scales, None, None, None, "int8", k, "dynamic")
    packed = flex_quantized._PACKED[(id(values), None)][1]
    np.testing.assert_array_equal(packed, pack_int8(values))
    quantized_linear(x, values, scales, None, None, None, "int8", k, "dynamic")
    assert flex_quantized._PACKED[(id(values), None)][1] is packed  # packed once
    np.testing.assert_allclose(got, exact(x, values, scales, None), rtol=2e-6, atol=1e-5)
    key = (id(values), None)
    del values
    gc.collect()
    assert key not in flex_quantized._PACKED  # dropped with its weight


def test_packed_path_where_it_cannot_run_is_an_ember_error(rng):
    x = rng.standard_normal((8, 128)).astype(np.float32)
    values = np.ones((20, 128), np.int8)  # N = 20: not whole panels of 16
    with pytest.raises(BackendUnavailableError, match="'packed' int8 kernel needs"):
        quantized_linear(x, values, np.ones((20, 1), np.float32), None, None, None, "int8", 128, "dynamic", "packed")


@pytest.mark.skipif(not has_vnni(), reason="no AVX-512 VNNI")
def test_the_unpacked_vnni_path_stays_reachable(rng):
    n, k = 32, 128
    values, scales = weights(n, k, rng)
    x = rng.standard_normal((8, k)).astype(np.float32)
    got = quantized_linear(x, values, scales, None, None, None, "int8", k, "dynamic", path="vnni")
    np.testing.assert_allclose(got, exact(x, values, scales, None), rtol=2e-6, atol=1e-5)
