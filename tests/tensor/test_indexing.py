"""Indexing ops against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from ember import DType, Tensor
from ember.errors import DTypeError, IndexOutOfBoundsError, ShapeError, ValueRangeError
from tests.conftest import assert_close


def test_gather(device, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    idx = rng.integers(0, 4, size=(3, 6))
    out = Tensor.from_data(x, device=device).gather(1, Tensor.from_data(idx, device=device))
    assert_close(out, np.take_along_axis(x, idx, 1))
    idx0 = rng.integers(0, 3, size=(2, 4))
    assert_close(Tensor.from_data(x, device=device).gather(0, idx0.tolist()), np.take_along_axis(x, idx0, 0))
    small = rng.integers(0, 4, size=(2, 2))
    assert_close(Tensor.from_data(x, device=device).gather(1, small), np.take_along_axis(x[:2], small, 1))


def test_scatter_accumulates(device):
    x = Tensor.zeros([2, 3], device=device)
    idx = Tensor.from_ints([[0, 0, 2], [1, 1, 1]], device=device)
    values = Tensor.ones([2, 3], device=device)
    assert x.scatter(1, idx, values).tolist() == [[2.0, 0.0, 1.0], [0.0, 3.0, 0.0]]


def test_select_and_select_assign(device, rng):
    x = rng.standard_normal((4, 3)).astype(np.float32)
    t = Tensor.from_data(x, device=device)
    idx = Tensor.from_ints([3, 0, 3], device=device)
    assert_close(t.select(0, idx), x[[3, 0, 3]])
    assert_close(t.select(1, [2]), x[:, [2]])
    added = t.select_assign(0, idx, Tensor.ones([3, 3], device=device))
    expected = x.copy()
    np.add.at(expected, [3, 0, 3], 1.0)
    assert_close(added, expected)


def test_index_errors(device):
    # Bounds are checked where the kernel runs: at once on eager devices, at the next
    # sync point (here .to_data()) on a fusion device.
    t = Tensor.zeros([2, 3], device=device)
    with pytest.raises(IndexOutOfBoundsError, match="out of bounds"):
        t.select(1, [3]).to_data()
    with pytest.raises(IndexOutOfBoundsError):
        t.gather(1, Tensor.from_ints([[5]], device=device)).to_data()
    with pytest.raises(IndexOutOfBoundsError):
        t.select(0, [-1]).to_data()
    with pytest.raises(DTypeError, match="int tensor"):
        t.select(0, Tensor.from_floats([0.0], device=device))
    with pytest.raises(ShapeError):
        t.gather(1, Tensor.from_ints([0, 1], device=device))
    with pytest.raises(ShapeError):
        t.scatter(1, Tensor.from_ints([[0]], device=device), Tensor.ones([1, 2], device=device))
    with pytest.raises(ShapeError):
        t.select_assign(0, [0], Tensor.ones([2, 3], device=device))


def test_masks(device):
    t = Tensor.from_floats([1.0, -2.0, 3.0], device=device)
    mask = t.lower_elem(0)
    assert t.mask_fill(mask, 0.0).tolist() == [1.0, 0.0, 3.0]
    assert t.mask_where(mask, Tensor.full([3], 9.0, device=device)).tolist() == [1.0, 9.0, 3.0]
    assert t.where(mask, 0.0).tolist() == [0.0, -2.0, 0.0]
    m2 = Tensor.from_bools([[True], [False]], device=device)
    assert t.mask_fill(m2, 5.0).tolist() == [[5.0, 5.0, 5.0], [1.0, -2.0, 3.0]]
    assert (
        Tensor.from_ints([1, 2], device=device).mask_fill(Tensor.from_bools([True, False], device=device), 0.5).dtype
        is DType.FLOAT32
    )
    with pytest.raises(DTypeError, match="bool Tensor"):
        t.mask_fill(Tensor.from_ints([1, 0, 1], device=device), 0.0)
    with pytest.raises(ShapeError):
        t.mask_fill(Tensor.from_bools([True, False], device=device), 0.0)


def test_argwhere_nonzero(device):
    t = Tensor.from_data([[0, 1], [2, 0]], device=device)
    assert t.argwhere().tolist() == [[0, 1], [1, 0]]
    rows, cols = t.nonzero()
    assert rows.tolist() == [0, 1] and cols.tolist() == [1, 0]
    assert Tensor.zeros([2], device=device).argwhere().dims() == [0, 1]


def test_one_hot(device):
    t = Tensor.from_ints([0, 2, 1], device=device)
    assert t.one_hot(3).tolist() == [[1, 0, 0], [0, 0, 1], [0, 1, 0]]
    assert t.one_hot(3).dtype is DType.INT64
    assert t.one_hot_fill(3, 1.0, -1.0).tolist()[0] == [1.0, -1.0, -1.0]
    with pytest.raises(ValueRangeError, match="outside"):
        t.one_hot(2)
    with pytest.raises(DTypeError):
        Tensor.from_floats([0.0], device=device).one_hot(2)
