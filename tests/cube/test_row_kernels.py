"""The row kernels (one workgroup per contiguous row) of reductions and softmax against
float64 numpy: vec4 and scalar loads, with and without subgroup operations, CPU- and
GPU-sized workgroups, NaN and infinities, every dtype."""

from __future__ import annotations

import numpy as np
import pytest

from ember.backend.ops import ReduceOp

REDUCE = {
    ReduceOp.SUM: np.sum,
    ReduceOp.MEAN: np.mean,
    ReduceOp.MAX: np.max,
    ReduceOp.MIN: np.min,
    ReduceOp.PROD: np.prod,
}


@pytest.fixture
def rng():
    return np.random.default_rng(3)


@pytest.fixture(params=["subgroups", "tree"])
def flavour(request, backend, monkeypatch):
    """The workgroup combine with subgroup operations (where the adapter has them) or
    through a tree in workgroup memory."""
    if request.param == "subgroups" and not backend.runtime.subgroups:
        pytest.skip("this adapter has no subgroup operations")
    monkeypatch.setattr(backend.runtime, "subgroups", request.param == "subgroups")
    return request.param


@pytest.fixture(params=["cpu", "gpu"])
def sizing(request, backend, monkeypatch):
    """Workgroup sizes as for a CPU adapter (16) or a GPU (64 to 256)."""
    monkeypatch.setattr(backend.runtime, "cpu", request.param == "cpu")
    return request.param


def _kernels(backend, monkeypatch):
    seen = []
    original = backend.runtime.launch3

    def hook(kernel, buffers, info, groups):
        seen.append(kernel)
        original(kernel, buffers, info, groups)

    monkeypatch.setattr(backend.runtime, "launch3", hook)
    return seen


@pytest.mark.parametrize("shape", [(5, 100), (3, 2, 132), (7, 130), (2, 4100)])
@pytest.mark.parametrize("op", sorted(REDUCE))
def test_float_reductions(backend, rng, monkeypatch, flavour, sizing, shape, op):
    spread = 0.02 if op == ReduceOp.PROD else 0.5  # products of 4100 factors stay in range
    x = rng.uniform(1 - spread, 1 + spread, shape).astype(np.float32)
    kernels = _kernels(backend, monkeypatch)
    got = backend.to_numpy(backend.reduce(op, backend.from_numpy(x), len(shape) - 1))
    want = REDUCE[op](x.astype(np.float64), axis=-1, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=2e-5 if op != ReduceOp.PROD else 1e-3)
    name = kernels[-1].name
    assert "_row" in name and name.endswith("_sg") == (flavour == "subgroups")
    assert ("_v" in name) == (shape[-1] % 4 == 0)  # vec4 loads for rows of whole quads


@pytest.mark.parametrize("op", [ReduceOp.MAX, ReduceOp.MIN, ReduceOp.SUM])
def test_nan_and_infinity_propagate(backend, flavour, op):
    x = np.ones((4, 200), np.float32)
    x[0, 17] = np.nan
    x[1, 199] = np.inf
    x[2, 0] = -np.inf
    got = backend.to_numpy(backend.reduce(op, backend.from_numpy(x), 1))
    want = REDUCE[op](x.astype(np.float64), axis=1, keepdims=True)
    np.testing.assert_array_equal(got, want.astype(np.float32))


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "bool", "float16", "bfloat16"])
@pytest.mark.parametrize("n", [128, 131])
def test_other_dtypes(backend, rng, flavour, dtype, n):
    import ml_dtypes  # noqa: F401  (bfloat16 for numpy)

    if dtype == "bool":
        x = rng.random((6, n)) > 0.1
        g = backend.from_numpy(x)
        assert (backend.to_numpy(backend.reduce(ReduceOp.ANY, g, 1)) == x.any(1, keepdims=True)).all()
        assert (backend.to_numpy(backend.reduce(ReduceOp.ALL, g, 1)) == x.all(1, keepdims=True)).all()
        return
    if dtype in ("int32", "int64", "uint8"):
        x = rng.integers(-50 if dtype != "uint8" else 0, 50, (6, n)).astype(dtype)
        if dtype == "int64":
            x[0, 3] = 2**40
        g = backend.from_numpy(x)
        for op in (ReduceOp.SUM, ReduceOp.MAX, ReduceOp.MIN):
            want = REDUCE[op](x.astype(np.int64), axis=1, keepdims=True)
            if dtype == "uint8":
                want = want % 256
            assert (backend.to_numpy(backend.reduce(op, g, 1)).astype(np.int64) == want).all(), op
        return
    x = rng.uniform(-1, 1, (6, n)).astype(dtype)
    got = backend.to_numpy(backend.reduce(ReduceOp.SUM, backend.from_numpy(x), 1)).astype(np.float64)
    np.testing.assert_allclose(got, x.astype(np.float64).sum(1, keepdims=True), rtol=2e-2, atol=5e-2)


def test_offset_and_strided_views(backend, rng, flavour):
    x = rng.standard_normal((9, 136)).astype(np.float32)
    g = backend.from_numpy(x)
    for view, ref in [
        (backend.slice(g, [(1, 9, 1), (4, 136, 1)]), x[1:, 4:]),  # aligned rows: vec4
        (backend.slice(g, [(1, 9, 1), (1, 133, 1)]), x[1:, 1:133]),  # unaligned: scalar loads
        (backend.slice(g, [(0, 9, 2), (0, 136, 1)]), x[::2]),  # every other row
    ]:
        got = backend.to_numpy(backend.reduce(ReduceOp.SUM, view, 1))
        np.testing.assert_allclose(got, ref.astype(np.float64).sum(1, keepdims=True), rtol=1e-5, atol=1e-5)


def _softmax(x: np.ndarray, log: bool) -> np.ndarray:
    x = x.astype(np.float64)
    z = x - x.max(axis=-1, keepdims=True)
    out = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return out if log else np.exp(out)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("shape", [(4, 100), (3, 1024), (2, 5000), (5, 131), (2, 3, 72)])
def test_softmax_rows(backend, rng, monkeypatch, flavour, sizing, log, shape):
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    kernels = _kernels(backend, monkeypatch)
    g = backend.from_numpy(x)
    got = backend.to_numpy(backend.log_softmax(g, x.ndim - 1) if log else backend.softmax(g, x.ndim - 1))
    np.testing.assert_allclose(got, _softmax(x, log), rtol=1e-5, atol=1e-6)
    assert "softmax_row" in kernels[-1].name


def test_softmax_special_values(backend, flavour):
    x = np.zeros((3, 96), np.float32)
    x[0, 5] = np.nan
    x[1, :] = -np.inf
    x[1, 7] = 0.0
    x[2, 9] = np.inf
    got = backend.to_numpy(backend.softmax(backend.from_numpy(x), 1))
    assert np.isnan(got[0]).all()
    assert got[1, 7] == 1.0 and (np.delete(got[1], 7) == 0).all()
    assert np.isnan(got[2]).any()  # inf - inf, as in numpy


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_softmax_half_storages(backend, rng, dtype):
    import ml_dtypes  # noqa: F401

    x = rng.standard_normal((4, 256)).astype(dtype)
    got = backend.to_numpy(backend.softmax(backend.from_numpy(x), 1)).astype(np.float64)
    np.testing.assert_allclose(got, _softmax(x.astype(np.float32), False), rtol=2e-2, atol=1e-3)


def test_softmax_over_a_non_last_dim_is_not_a_row_kernel(backend, rng):
    x = rng.standard_normal((100, 6)).astype(np.float32)
    got = backend.to_numpy(backend.softmax(backend.from_numpy(x), 0))
    z = x.astype(np.float64) - x.max(0)
    np.testing.assert_allclose(got, np.exp(z) / np.exp(z).sum(0), rtol=1e-5, atol=1e-6)
