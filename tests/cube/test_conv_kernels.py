"""Which conv path runs (im2col gathered in the register GEMM's loads, or materialised
for a tiled GEMM) and its results against float64 numpy, over dtypes and geometries.
(tests/cube/test_module_ops.py checks both paths against PyTorch on awkward shapes.)"""

from __future__ import annotations

import itertools

import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(9)


def _conv_ref(x, w, bias, stride, pad, groups=1):
    """2-D cross-correlation in float64 numpy, symmetric ``pad``."""
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for g, i, j in itertools.product(range(groups), range(kh), range(kw)):
        patch = x[:, g * cg : (g + 1) * cg, i : i + stride * oh : stride, j : j + stride * ow : stride]
        out[:, g * og : (g + 1) * og] += np.einsum("nchw,oc->nohw", patch, w[g * og : (g + 1) * og, :, i, j])
    return out if bias is None else out + bias[None, :, None, None]


def _names(backend, monkeypatch):
    seen = []
    original = backend.runtime.launch3

    def hook(kernel, buffers, info, groups):
        seen.append(kernel.name)
        original(kernel, buffers, info, groups)

    monkeypatch.setattr(backend.runtime, "launch3", hook)
    return seen


# The small CNN's two convs (im2col GEMMs 16x9 and 32x144), a strided grouped one.
CASES = {
    "conv1": ((4, 1, 28, 28), (16, 1, 3, 3), 1, 1, 1),
    "conv2": ((4, 16, 14, 14), (32, 16, 3, 3), 1, 1, 1),
    "strided_groups": ((2, 6, 9, 11), (4, 3, 3, 3), 2, 0, 2),
}


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("case", sorted(CASES))
def test_small_convs_gather_im2col_in_the_gemm(backend, rng, monkeypatch, case, bias):
    xs, ws, stride, pad, groups = CASES[case]
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32) if bias else None
    names = _names(backend, monkeypatch)
    out = backend.conv(
        backend.from_numpy(x),
        backend.from_numpy(w),
        None if b is None else backend.from_numpy(b),
        (stride, stride),
        ((pad, pad), (pad, pad)),
        (1, 1),
        groups,
    )
    np.testing.assert_allclose(backend.to_numpy(out), _conv_ref(x, w, b, stride, pad, groups), rtol=1e-4, atol=1e-4)
    assert names == [n for n in names if n.startswith("matmul_regs")] and len(names) == 1  # one launch, no im2col


@pytest.mark.parametrize("dtype", ["int32", "float16", "bfloat16"])
def test_fused_conv_dtypes(backend, rng, dtype):
    import ml_dtypes  # noqa: F401  (bfloat16 for numpy)

    if dtype == "int32":
        x = rng.integers(-3, 4, (2, 3, 7, 6)).astype(np.int32)
        w = rng.integers(-3, 4, (5, 3, 3, 3)).astype(np.int32)
        b = rng.integers(-3, 4, 5).astype(np.int32)
    else:
        x = rng.standard_normal((2, 3, 7, 6)).astype(dtype)
        w = rng.standard_normal((5, 3, 3, 3)).astype(dtype)
        b = rng.standard_normal(5).astype(dtype)
    out = backend.to_numpy(
        backend.conv(
            backend.from_numpy(x), backend.from_numpy(w), backend.from_numpy(b), (1, 1), ((1, 1), (1, 1)), (1, 1), 1
        )
    )
    want = _conv_ref(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), 1, 1)
    assert out.dtype == x.dtype
    if dtype == "int32":
        assert (out == want).all()
    else:
        np.testing.assert_allclose(out.astype(np.float64), want, rtol=3e-2, atol=6e-2)


def test_large_convs_on_a_gpu_materialise_columns_for_a_tile(backend, rng, monkeypatch):
    """With GPU sizing, many channels over a large image take im2col and a tiled matmul
    (the bias in its epilogue: two launches)."""
    monkeypatch.setattr(backend.runtime, "cpu", False)
    x = rng.standard_normal((2, 32, 32, 32)).astype(np.float32)
    w = rng.standard_normal((64, 32, 3, 3)).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    names = _names(backend, monkeypatch)
    out = backend.conv(
        backend.from_numpy(x), backend.from_numpy(w), backend.from_numpy(b), (1, 1), ((1, 1), (1, 1)), (1, 1), 1
    )
    np.testing.assert_allclose(backend.to_numpy(out), _conv_ref(x, w, b, 1, 1), rtol=1e-4, atol=1e-3)
    assert names[0] == "im2col" and names[1].startswith("matmul_128x64") and len(names) == 2
