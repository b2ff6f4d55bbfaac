"""int4 weights times dynamic int8 activations (``QuantScheme.int4(activations="dynamic")``):
flex's ``vpdpbusd`` kernel, its portable path, the fallbacks and the compiled plan's own
step, against float64 of the int8-rounded rows times the dequantized weight, and against
the exact integer block sums."""

from __future__ import annotations

import ctypes
import warnings

import numpy as np
import pytest

import ember
from ember import Device, Tensor
from ember.backend.flex.quant_int4_dynamic import CHUNK, CHUNK_BYTES
from ember.backend.flex.quant_kernels import has_vnni, quant_kernels
from ember.backend.flex.quantized import quantize_rows_int8, quantized_linear
from ember.errors import BackendUnavailableError, FallbackWarning
from ember.models import Gpt2Config, GPT2LMHeadModel, generate
from ember.nn import LinearConfig
from ember.quantization import QuantScheme, quantize

SCHEME = QuantScheme.int4(activations="dynamic")
needs_kernels = pytest.mark.skipif(quant_kernels() is None, reason="llvmlite cannot compile for this host")


def parts(w: np.ndarray, scheme: QuantScheme = SCHEME):
    q = quantize(Tensor.from_data(w), scheme)
    return q, q.values.to_numpy(), q.scales.to_numpy()


def oracles(x: np.ndarray, q, values: np.ndarray, scales: np.ndarray, bias: np.ndarray | None):
    """float64 of the int8-rounded rows times the dequantized weight, and the exact
    integer sums of each block of 32 scaled in float64."""
    xq, sx = quantize_rows_int8(x, None)
    bias64 = 0.0 if bias is None else bias.astype(np.float64)
    fake = (xq.astype(np.float64) * sx[:, None]) @ q.dequantize().to_numpy().astype(np.float64).T + bias64
    n, k = values.shape[0], x.shape[1]
    v = values.reshape(n, k // 32, 16).astype(np.int64)
    nibbles = np.concatenate([v & 15, v >> 4], axis=2) - 8  # [n, blocks, 32]
    blocks = np.einsum("mbj,nbj->mnb", xq.reshape(-1, k // 32, 32).astype(np.int64), nibbles)
    exact = (blocks * scales.astype(np.float64)[None]).sum(axis=2) * sx[:, None].astype(np.float64) + bias64
    return fake, exact


# rows: one (decode), 7 (a 4-row tile and 3 single rows), 40 (prefill: 4-row tiles)
no_vnni = pytest.mark.skipif(not has_vnni(), reason="no AVX-512 VNNI")
CASES = [(path, m) for path in (None, "portable", "numpy") for m in (1, 7, 40)]
CASES += [pytest.param("vnni", m, marks=no_vnni) for m in (1, 7, 40)]


@needs_kernels
@pytest.mark.parametrize("path, m", CASES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_int4_dynamic_matches_float64_of_rounded_rows_and_dequantized_weight(path, m, with_bias, rng):
    n, k = 70, 3 * CHUNK  # 70 weight rows: tiles of 4 and of 1, a full and a partial cache block
    w = rng.standard_normal((n, k)).astype(np.float32)
    x = (rng.standard_normal((m, k)) * 2).astype(np.float32)
    x[0, 7] = 30.0  # an outlier sets row 0's scale
    bias = rng.standard_normal(n).astype(np.float32) if with_bias else None
    q, values, scales = parts(w)
    fake, exact = oracles(x, q, values, scales, bias)
    got = quantized_linear(x, values, scales, None, bias, None, "int4", 32, "dynamic", path=path)
    assert got.dtype == np.float32 and got.shape == (m, n)
    np.testing.assert_allclose(got, fake, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-4)


@needs_kernels
@pytest.mark.parametrize("path", ["portable", pytest.param("vnni", marks=no_vnni)])
def test_the_kernels_sum_each_block_exactly(path, rng):
    """The integer part is exact: small integer rows and scales of powers of two leave
    no rounding anywhere, so the result equals the integer oracle bit for bit."""
    n, k = 9, 2 * CHUNK
    values = rng.integers(0, 256, (n, k // 2), dtype=np.uint8)
    scales = (2.0 ** rng.integers(-3, 3, (n, k // 32))).astype(np.float32)
    x = rng.integers(-127, 128, (2, k)).astype(np.float32)
    x[:, 0] = 127.0  # max |x| = 127: the rows' scale is 1, the rows are their own int8 values
    got = quantized_linear(x, values, scales, None, None, None, "int4", 32, "dynamic", path=path)
    q_values = np.concatenate([values.reshape(n, -1, 16) & 15, values.reshape(n, -1, 16) >> 4], axis=2)
    weight = ((q_values.astype(np.float64) - 8) * scales[:, :, None]).reshape(n, k)
    np.testing.assert_array_equal(got, (x.astype(np.float64) @ weight.T).astype(np.float32))


@needs_kernels
def test_the_prepared_rows_are_the_kernels_layout(rng):
    """``ember_q4i8_prepare``: per chunk of 128 values, bytes ``q`` of ``xlo`` hold value
    ``32 (q // 16) + q % 16`` of the int8 row, ``xhi`` the same plus 16, then 16 int32
    ``-8 *`` the sum of the 8 values each 32-bit lane multiplies."""
    from ember.backend.flex.native import address

    m, k = 2, 2 * CHUNK
    x = rng.standard_normal((m, k)).astype(np.float32)
    xq, sx, xsum = np.empty((m, k), np.int8), np.empty(m, np.float32), np.empty(m, np.int32)
    laid = np.empty(m * (k // CHUNK) * CHUNK_BYTES, np.uint8)
    quant_kernels().prepare_int4(
        address(x), address(xq), address(sx), address(xsum), address(laid), m, k, ctypes.c_float(0.0)
    )
    want_q, want_s = quantize_rows_int8(x, None)
    np.testing.assert_array_equal(xq, want_q)
    np.testing.assert_array_equal(sx, want_s)
    chunks = laid.reshape(m, k // CHUNK, CHUNK_BYTES)
    q = np.arange(64)
    for r in range(m):
        for c in range(k // CHUNK):
            row = want_q[r, c * CHUNK : (c + 1) * CHUNK].astype(np.int64)
            lo, hi = row[32 * (q // 16) + q % 16], row[32 * (q // 16) + 16 + q % 16]
            np.testing.assert_array_equal(chunks[r, c, :64].view(np.int8), lo)
            np.testing.assert_array_equal(chunks[r, c, 64:128].view(np.int8), hi)
            start = -8 * (lo + hi).reshape(16, 4).sum(axis=1)
            np.testing.assert_array_equal(chunks[r, c, 128:].view(np.int32), start)


@needs_kernels
@pytest.mark.parametrize(
    "scheme, k",
    [
        (QuantScheme.int4(block=64, activations="dynamic"), 256),
        (SCHEME, 96),
        (QuantScheme.int4(block=None, activations="dynamic"), 128),
    ],
    ids=["block64", "k96", "per-channel"],
)
def test_other_groups_and_widths_round_the_rows_then_run_the_weight_only_product(scheme, k, rng):
    w = rng.standard_normal((10, k)).astype(np.float32)
    x = rng.standard_normal((2, k)).astype(np.float32)
    q, values, scales = parts(w, scheme)
    xq, sx = quantize_rows_int8(x, None)
    fake = (xq.astype(np.float64) * sx[:, None]) @ q.dequantize().to_numpy().astype(np.float64).T
    for path in (None, "numpy"):
        got = quantized_linear(x, values, scales, None, None, None, "int4", q.group, "dynamic", path=path)
        np.testing.assert_allclose(got, fake, rtol=1e-5, atol=1e-4)
    with pytest.raises(BackendUnavailableError, match="int4 x int8 kernel needs .*a symmetric weight in blocks of 32"):
        quantized_linear(x, values, scales, None, None, None, "int4", q.group, "dynamic", path="portable")


@needs_kernels
def test_a_nan_row_gives_nan_outputs_and_a_zero_row_zeros(rng):
    w = rng.standard_normal((8, CHUNK)).astype(np.float32)
    x = rng.standard_normal((3, CHUNK)).astype(np.float32)
    x[1, 5] = np.nan
    x[2] = 0.0
    _, values, scales = parts(w)
    got = quantized_linear(x, values, scales, None, None, None, "int4", 32, "dynamic")
    assert np.isfinite(got[0]).all() and np.isnan(got[1]).all()
    np.testing.assert_array_equal(got[2], 0.0)


def test_the_scheme_round_trips_and_refuses_asymmetric_weights():
    from ember.errors import ConfigError

    assert QuantScheme.from_json(SCHEME.to_json()) == SCHEME
    assert repr(SCHEME) == "QuantScheme(int4, symmetric, block(32), activations=dynamic)"
    with pytest.raises(ConfigError, match="symmetric weights"):
        QuantScheme.int4(symmetric=False, activations="dynamic")


def test_a_layer_on_flex_matches_the_composite_on_cube(rng):
    """The same function on a device without the kernel: the composite rounds the rows
    per row and multiplies the dequantized weight."""
    try:
        cube = Device.wgpu()
    except Exception as exc:  # pragma: no cover - wgpu with Mesa is installed in CI
        pytest.skip(f"no wgpu device: {exc}")
    layer = LinearConfig(256, 20).init(Device.flex()).quantized(SCHEME)
    x = rng.standard_normal((1, 256)).astype(np.float32)
    flex_out = layer(Tensor.from_data(x)).to_numpy()
    cube_out = layer.to_device(cube)(Tensor.from_data(x, device=cube)).to_numpy()
    np.testing.assert_allclose(cube_out, flex_out, rtol=1e-4, atol=1e-4)


def test_compiled_generate_with_int4_dynamic_matches_eager_with_the_kernel_in_the_plan(rng, monkeypatch):
    """A decoder 128 wide (K = 128 and 512: the kernel's shapes), compiled decode steps
    against eager ones: the same tokens, no fallback, and after the first compiled run no
    decode step leaves the plan for flex's ``quantized_linear``."""
    from ember.backend.flex import FlexBackend

    device = Device.flex()
    device.seed(2)
    config = Gpt2Config(vocab_size=96, n_positions=64, n_embd=128, n_layer=2, n_head=4, initializer_range=0.3)
    model = GPT2LMHeadModel.from_config(config, device).quantize(SCHEME)
    prompt = rng.integers(0, 96, (1, 6))
    eager = generate(model, prompt, 12, compile=False).to_numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        np.testing.assert_array_equal(generate(model, prompt, 12).to_numpy(), eager)
        calls = []
        kernel = FlexBackend.quantized_linear

        def counted(self, x, *args):
            calls.append(x.shape)
            return kernel(self, x, *args)

        monkeypatch.setattr(FlexBackend, "quantized_linear", counted)
        np.testing.assert_array_equal(generate(model, prompt, 12).to_numpy(), eager)
    assert all(int(np.prod(shape[:-1])) > 1 for shape in calls), calls  # only the prefill's rows left the plan


def test_compile_of_a_layer_is_flex_bit_for_bit(rng):
    layer = LinearConfig(CHUNK, 13).init(Device.flex()).quantized(SCHEME)
    step = ember.compile(lambda x: layer(x))
    x = Tensor.from_data(rng.standard_normal((2, CHUNK)).astype(np.float32))
    for _ in range(3):
        np.testing.assert_array_equal(step(x).to_numpy(), layer(x).to_numpy())


@needs_kernels
@pytest.mark.parametrize("path", [None, "portable", "numpy", pytest.param("vnni", marks=no_vnni)])
def test_a_static_scale_rounds_every_row_to_the_calibrated_grid(path, rng):
    n, k = 12, CHUNK
    w = rng.standard_normal((n, k)).astype(np.float32)
    x = rng.standard_normal((5, k)).astype(np.float32)
    q, values, scales = parts(w, QuantScheme.int4(activations="static"))
    scale = np.array([0.02], np.float32)
    grid = np.clip(np.rint(x / scale[0]), -127, 127) * np.float64(scale[0])
    expected = grid @ q.dequantize().to_numpy().astype(np.float64).T
    got = quantized_linear(x, values, scales, None, None, scale, "int4", 32, "static", path=path)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)
