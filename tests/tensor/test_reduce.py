"""Reductions, scans and sorting against numpy, with Burn's shapes."""

from __future__ import annotations

import numpy as np
import pytest

from ember import DType, Tensor
from ember.errors import ShapeError, ValueRangeError
from tests.conftest import assert_close


@pytest.fixture
def data(rng):
    return rng.standard_normal((3, 4, 5)).astype(np.float32)


@pytest.mark.parametrize(
    ("name", "oracle"),
    [("sum", np.sum), ("mean", np.mean), ("prod", np.prod), ("max", np.max), ("min", np.min)],
)
def test_full_and_dim_reductions(device, data, name, oracle):
    t = Tensor.from_data(data, device=device)
    full = getattr(t, name)()
    assert full.dims() == [1]
    assert_close(full, [oracle(data.astype(np.float64))], rtol=1e-4)
    for dim in (0, 1, -1):
        method = name + "_dim"
        out = getattr(t, method)(dim)
        assert_close(out, oracle(data.astype(np.float64), axis=dim, keepdims=True), rtol=1e-4, atol=1e-5)


def test_sum_dims_and_int_reductions(device):
    t = Tensor.arange(24, device=device).reshape([2, 3, 4])
    assert t.sum_dims([0, 2]).dims() == [1, 3, 1]
    assert t.sum().tolist() == [276] and t.sum().dtype is DType.INT64
    assert t.mean().dtype is DType.FLOAT32
    assert Tensor.from_bools([True, True, False], device=device).sum().tolist() == [2]


def test_arg_and_with_indices(device, data):
    t = Tensor.from_data(data, device=device)
    assert t.argmax(1).tolist() == np.argmax(data, 1)[:, None].tolist()
    assert t.argmin(-1).tolist() == np.argmin(data, -1)[..., None].tolist()
    values, indices = t.max_dim_with_indices(2)
    assert_close(values, data.max(2, keepdims=True))
    assert indices.dtype is DType.INT64
    values, _ = t.min_dim_with_indices(0)
    assert_close(values, data.min(0, keepdims=True))
    assert_close(t.max_dim(1), data.max(1, keepdims=True))
    ties = Tensor.from_floats([1.0, 3.0, 3.0], device=device)
    assert ties.argmax(0).tolist() == [1]


def test_any_all(device):
    t = Tensor.from_bools([[True, False], [False, False]], device=device)
    assert t.any().tolist() == [True] and t.all().tolist() == [False]
    assert t.any_dim(1).tolist() == [[True], [False]]
    assert Tensor.from_floats([1.0, 2.0], device=device).all().tolist() == [True]


def test_var_std(device, data):
    t = Tensor.from_data(data, device=device)
    assert_close(t.var(1), data.astype(np.float64).var(1, ddof=1, keepdims=True), rtol=1e-4)
    assert_close(t.var_bias(2), data.astype(np.float64).var(2, keepdims=True), rtol=1e-4)
    assert_close(t.std(0), data.astype(np.float64).std(0, ddof=1, keepdims=True), rtol=1e-4)
    _, mean = t.var_mean(1)
    assert_close(mean, data.mean(1, keepdims=True), rtol=1e-5)


def test_logsumexp_and_norm(device, data):
    t = Tensor.from_data(data * 30, device=device)
    x = data.astype(np.float64) * 30
    peak = x.max(1, keepdims=True)
    assert_close(t.logsumexp(1), np.log(np.exp(x - peak).sum(1, keepdims=True)) + peak, rtol=1e-5)
    assert_close(Tensor.from_data(data, device=device).norm(), [np.linalg.norm(data.reshape(-1))], rtol=1e-5)
    assert_close(Tensor.from_data(data, device=device).norm(1, dim=2), np.abs(data).sum(2, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize("name", ["cumsum", "cumprod", "cummax", "cummin"])
def test_scans(device, data, name):
    oracle = {
        "cumsum": np.cumsum,
        "cumprod": np.cumprod,
        "cummax": np.maximum.accumulate,
        "cummin": np.minimum.accumulate,
    }[name]
    t = Tensor.from_data(data, device=device)
    for dim in (0, 2):
        assert_close(getattr(t, name)(dim), oracle(data.astype(np.float64), axis=dim), rtol=1e-4, atol=1e-5)


def test_sort_argsort_topk(device, rng):
    x = rng.integers(0, 4, size=(3, 6)).astype(np.float32)
    t = Tensor.from_data(x, device=device)
    assert t.argsort(1).tolist() == np.argsort(x, 1, kind="stable").tolist()
    assert_close(t.sort(0), np.sort(x, 0))
    values, indices = t.sort_with_indices(1, descending=True)
    assert_close(values, -np.sort(-x, 1))
    # stable descending: ties keep their original order
    desc = np.argsort(-x, 1, kind="stable")
    assert indices.tolist() == desc.tolist()
    top, top_idx = t.topk_with_indices(2, 1)
    assert_close(top, -np.sort(-x, 1)[:, :2])
    assert top_idx.tolist() == desc[:, :2].tolist()
    with pytest.raises(ValueRangeError):
        t.topk(7, 1)
    nan = Tensor.from_floats([1.0, float("nan"), 0.0], device=device)
    assert nan.argsort(0).tolist() == [2, 0, 1]
    assert nan.argsort(0, descending=True).tolist() == [1, 0, 2]


def test_empty_reductions(device):
    empty = Tensor.zeros([0, 3], device=device)
    assert empty.sum_dim(0).tolist() == [[0.0, 0.0, 0.0]]
    with pytest.raises(ShapeError, match="empty"):
        empty.max_dim(0)
    with pytest.raises(ShapeError, match="empty"):
        empty.argmax(0)
