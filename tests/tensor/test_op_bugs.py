"""Regressions for the op bugs of issue 19, each on every device of the conformance
fixture (the cube-only ones run wherever they apply)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ember import DType, Tensor
from ember.errors import IndexOutOfBoundsError


def test_a_list_of_bools_is_a_mask(device):
    t = Tensor.from_ints([10, 20, 30], device=device)
    assert t[[True, False, True]].tolist() == [10, 30]
    assert t[[False, False, False]].tolist() == []
    m = Tensor.from_ints([[1, 2], [3, 4]], device=device)
    assert m[[False, True]].tolist() == [[3, 4]]


def test_a_mask_of_the_wrong_length_raises_index_error(device):
    t = Tensor.from_ints([10, 20, 30], device=device)
    with pytest.raises(IndexError, match="mask"):
        t[[True, False]]
    with pytest.raises(IndexOutOfBoundsError):
        t[Tensor.from_bools([True, False, True, True], device=device)]


def test_float_index_tensors_raise_index_error(device):
    t = Tensor.from_ints([10, 20, 30], device=device)
    with pytest.raises(IndexError, match="int or bool"):
        t[Tensor.from_floats([0.0, 1.0], device=device)]
    with pytest.raises(IndexError):
        t[[0.5]]


def test_all_close_with_infinities(device):
    inf = Tensor.from_floats([math.inf], device=device)
    assert not inf.all_close(Tensor.from_floats([-math.inf], device=device))
    assert inf.all_close(Tensor.from_floats([math.inf], device=device))
    assert not Tensor.from_floats([math.inf], device=device).all_close(Tensor.from_floats([1e30], device=device))
    nan = Tensor.from_floats([math.nan], device=device)
    assert not nan.all_close(nan)
    assert nan.all_close(nan, equal_nan=True)


def test_norm_with_p_zero_counts_nonzeros_and_minus_inf_takes_the_smallest(device):
    t = Tensor.from_floats([[0.0, -3.0, 2.0], [0.0, 0.0, -1.0]], device=device)
    assert t.norm(0, 1).tolist() == [[2.0], [1.0]]
    assert t.norm(0).tolist() == [3.0]
    assert t.norm(-math.inf, 1).tolist() == [[0.0], [0.0]]
    assert Tensor.from_floats([[4.0, -3.0, 2.0]], device=device).norm(-math.inf, 1).tolist() == [[2.0]]


def test_nonzero_of_an_all_false_tensor_is_an_empty_list(device):
    assert Tensor.zeros([2, 3], device=device).nonzero() == []
    found = Tensor.from_ints([[0, 5], [7, 0]], device=device).nonzero()
    assert [c.tolist() for c in found] == [[0, 1], [1, 0]]


def test_max_and_min_of_bools_stay_bool(device):
    a = Tensor.from_bools([True, False, False], device=device)
    b = Tensor.from_bools([False, False, True], device=device)
    for out, expected in (
        (a.maximum(b), [True, False, True]),
        (a.minimum(b), [False, False, False]),
        (a.max(), [True]),
        (a.min(), [False]),
        (a.max_dim(0), [True]),
        (a.max_pair(b), [True, False, True]),
    ):
        assert out.dtype is DType.BOOL
        assert out.tolist() == expected


def test_pow_of_minus_infinity(device):
    x = Tensor.from_floats([-math.inf] * 6, device=device)
    y = Tensor.from_floats([0.3, 3.0, 2.0, -3.0, -2.0, -0.5], device=device)
    out = x.powf(y).to_numpy()
    np.testing.assert_array_equal(out, [math.inf, -math.inf, math.inf, -0.0, 0.0, 0.0])
    assert np.signbit(out[3]) and not np.signbit(out[4])
    assert x.powf_scalar(0.3).tolist()[0] == math.inf


def test_asin_and_acos_are_nan_outside_the_unit_interval(device):
    t = Tensor.from_floats([-2.0, -1.0001, 1.5, 1.0, -1.0], device=device)
    for out, edge in ((t.asin(), [math.pi / 2, -math.pi / 2]), (t.acos(), [0.0, math.pi])):
        values = out.to_numpy()
        assert np.isnan(values[:3]).all()
        np.testing.assert_allclose(values[3:], edge, atol=1e-6)


def test_argwhere_of_a_rank_0_tensor(device):
    assert Tensor.from_floats(3.0, device=device).argwhere().dims() == [1, 0]
    assert Tensor.from_floats(0.0, device=device).argwhere().dims() == [0, 0]


def test_sign_of_positive_zero_is_positive_zero(device):
    out = Tensor.from_floats([0.0, -0.0, 2.0, -3.0], device=device).sign().to_numpy()
    np.testing.assert_array_equal(out, [0.0, 0.0, 1.0, -1.0])
    assert not np.signbit(out[0])


def test_burn_ranges_with_a_negative_step_walk_backwards(device):
    t = Tensor.arange(10, device=device)
    assert t.slice([(0, 5, -1)]).tolist() == [4, 3, 2, 1, 0]
    assert t.slice([(2, 8, -2)]).tolist() == [7, 5, 3]
    assert t.slice([(None, None, -3)]).tolist() == [9, 6, 3, 0]
    assert t.slice([(5, 2, -1)]).tolist() == []
    assert t.slice_fill([(0, 6, -2)], -1).tolist() == [0, -1, 2, -1, 4, -1, 6, 7, 8, 9]
    assert t.slice_assign([(0, 3, -1)], Tensor.from_ints([7, 8, 9], device=device)).tolist()[:3] == [9, 8, 7]
    # Python's own slices keep Python's meaning.
    assert t[::-3].tolist() == [9, 6, 3, 0]
    assert t.slice([slice(8, 2, -2)]).tolist() == [8, 6, 4]
    m = Tensor.arange(12, device=device).reshape([3, 4])
    assert m.slice([None, (1, 4, -2)]).tolist() == [[3, 1], [7, 5], [11, 9]]


def test_squeeze_dims_of_nothing_squeezes_every_size_one_dim_as_burn(device):
    assert Tensor.zeros([1, 3, 1, 2], device=device).squeeze_dims([]).dims() == [3, 2]


def test_an_empty_int64_index_selects_nothing(device):
    # cube bound an empty int64 buffer with 4 bytes where the shader wants one 8-byte element.
    t = Tensor.from_floats([[1.0, 2.0], [3.0, 4.0]], device=device)
    empty = Tensor.from_ints([], device=device)
    assert t.select(0, empty).dims() == [0, 2]
    assert t[[]].dims() == [0, 2]
    assert t.select(1, Tensor.from_ints([1], device=device)).tolist() == [[2.0], [4.0]]
