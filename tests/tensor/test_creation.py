"""Creation and read-out of tensors."""

from __future__ import annotations

import pickle

import ml_dtypes
import numpy as np
import pytest

from ember import Device, Distribution, DType, Shape, Tensor, TensorData
from ember.errors import DTypeError, ShapeError
from tests.conftest import assert_close, float64_supported


def test_from_data_infers_dtypes(device):
    assert Tensor.from_data([1.0, 2.0], device=device).dtype is DType.FLOAT32
    assert Tensor.from_data([1, 2], device=device).dtype is DType.INT64
    assert Tensor.from_data([True], device=device).dtype is DType.BOOL
    if not float64_supported(device):
        return
    assert Tensor.from_data(np.zeros(2, np.float64), device=device).dtype is DType.FLOAT64
    assert Tensor.from_data(np.zeros(2, np.int32), device=device).dtype is DType.INT32
    assert Tensor.from_data(np.zeros(2, np.uint8), device=device).dtype is DType.UINT8
    assert Tensor.from_data(np.zeros(2, np.int16), device=device).dtype is DType.INT64
    assert Tensor.from_data(np.zeros(2, ml_dtypes.bfloat16), device=device).dtype is DType.BFLOAT16
    assert Tensor.from_data([[1, 2]], device=device, dtype="float16").dtype is DType.FLOAT16


def test_from_data_copies_input(device):
    array = np.ones(3, np.float32)
    t = Tensor.from_data(array, device=device)
    array[0] = 5
    assert t.tolist() == [1.0, 1.0, 1.0]
    out = t.to_numpy()
    out[1] = 7
    assert t.tolist() == [1.0, 1.0, 1.0]


def test_kind_constructors(device):
    assert Tensor.from_floats([[1, 2]], device=device).dtype is DType.FLOAT32
    if not float64_supported(device):
        return
    assert Tensor.from_floats([1], device=device, dtype="float64").dtype is DType.FLOAT64
    assert Tensor.from_ints([1.0, 2.0], device=device).tolist() == [1, 2]
    assert Tensor.from_bools([1, 0], device=device).tolist() == [True, False]
    with pytest.raises(DTypeError, match="from_floats"):
        Tensor.from_floats([1], device=device, dtype="int64")
    with pytest.raises(DTypeError, match="NaN"):
        Tensor.from_ints([float("nan")], device=device)


def test_ragged_and_bad_values_raise(device):
    with pytest.raises(ShapeError, match="ragged"):
        Tensor.from_data([[1, 2], [3]], device=device)
    with pytest.raises(ShapeError):
        Tensor.from_data(["a", {"b": 1}], device=device)
    with pytest.raises(DTypeError):
        Tensor.from_data(np.array(["a"]), device=device)


def test_full_zeros_ones_like(device):
    assert Tensor.zeros([2, 3], device=device).tolist() == [[0.0] * 3] * 2
    assert Tensor.ones(2, device=device, dtype="int32").tolist() == [1, 1]
    assert Tensor.full([2], 7, device=device).dtype is DType.INT64
    assert Tensor.full([2], 0.5, device=device).tolist() == [0.5, 0.5]
    assert Tensor.full([1], True, device=device).dtype is DType.BOOL
    if not float64_supported(device):
        return
    t = Tensor.from_floats([[1.0, 2.0]], device=device, dtype="float64")
    assert t.zeros_like().dtype is DType.FLOAT64
    assert t.ones_like().tolist() == [[1.0, 1.0]]
    assert t.full_like(3).tolist() == [[3.0, 3.0]]
    assert Tensor.zeros([0, 3], device=device).dims() == [0, 3]
    with pytest.raises(ShapeError):
        Tensor.zeros([-1], device=device)
    with pytest.raises(DTypeError):
        Tensor.full([2], 0.5, device=device, dtype="int64")


def test_arange_and_eye(device):
    assert Tensor.arange(4, device=device).tolist() == [0, 1, 2, 3]
    assert Tensor.arange(1, 7, 2, device=device).tolist() == [1, 3, 5]
    assert Tensor.arange(3, 0, -1, device=device).tolist() == [3, 2, 1]
    assert Tensor.arange(3, device=device, dtype="float32").dtype is DType.FLOAT32
    assert Tensor.eye(2, device=device).tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert Tensor.eye(2, 3, device=device, dtype="int64").tolist() == [[1, 0, 0], [0, 1, 0]]


def test_random_distributions(device):
    device.seed(7)
    u = Tensor.random([2000], Distribution.uniform(-2.0, 3.0), device=device).to_numpy()
    assert u.min() >= -2.0 and u.max() < 3.0 and abs(u.mean() - 0.5) < 0.15
    n = Tensor.random([4000], Distribution.normal(1.0, 2.0), device=device).to_numpy()
    assert abs(n.mean() - 1.0) < 0.15 and abs(n.std() - 2.0) < 0.15
    b = Tensor.random([4000], Distribution.bernoulli(0.25), device=device).to_numpy()
    assert set(np.unique(b)) <= {0.0, 1.0} and abs(b.mean() - 0.25) < 0.03
    d = Tensor.random([1000], Distribution.default(), device=device).to_numpy()
    assert d.min() >= 0 and d.max() < 1
    if not float64_supported(device):
        return
    assert Tensor.random([3], device=device, dtype="float64").dtype is DType.FLOAT64


def test_seed_gives_bit_identical_values(device):
    device.seed(42)
    a = Tensor.random([64, 4], Distribution.uniform(-1, 1), device=device).to_numpy()
    device.seed(42)
    b = Tensor.random([64, 4], Distribution.uniform(-1, 1), device=device).to_numpy()
    c = Tensor.random([64, 4], Distribution.uniform(-1, 1), device=device).to_numpy()
    assert a.tobytes() == b.tobytes()
    assert a.tobytes() != c.tobytes()


def test_distribution_validation():
    from ember.errors import ValueRangeError

    with pytest.raises(ValueRangeError):
        Distribution.uniform(1, 0)
    with pytest.raises(ValueRangeError):
        Distribution.normal(0, -1)
    with pytest.raises(ValueRangeError):
        Distribution.bernoulli(1.5)


def test_read_out(device):
    t = Tensor.from_floats([[1.0, 2.0, 3.0]], device=device)
    assert t.shape == Shape([1, 3]) == [1, 3]
    assert t.dims() == [1, 3]
    assert t.rank == 2
    assert t.num_elements() == 3
    assert t.device == device
    data = t.to_data()
    assert isinstance(data, TensorData)
    assert data.shape == [1, 3] and data.dtype is DType.FLOAT32
    assert data.tolist() == [[1.0, 2.0, 3.0]]
    assert data.to_vec() == [1.0, 2.0, 3.0]
    assert np.asarray(t).shape == (1, 3)
    assert t.sum().into_scalar() == 6.0
    assert isinstance(Tensor.from_ints([3], device=device).item(), int)
    assert float(Tensor.from_floats([2.5], device=device)) == 2.5
    with pytest.raises(ShapeError, match="exactly one element"):
        t.into_scalar()
    with pytest.raises(ValueError, match="ambiguous"):
        bool(t)
    assert len(t) == 1
    assert [row.tolist() for row in t] == [[1.0, 2.0, 3.0]]


def test_half_read_out(flex):
    t = Tensor.from_floats([1.5, 2.0], device=flex, dtype="bfloat16")
    assert t.tolist() == [1.5, 2.0]
    assert t.sum().into_scalar() == 3.5
    assert "bfloat16" in repr(t)


def test_repr(device):
    text = repr(Tensor.from_floats([[1.0, 2.0]], device=device))
    assert text.startswith("Tensor([[1., 2.]]") and "shape=[1, 2]" in text and "float32" in text
    assert repr(device) in text


def test_cast(device):
    t = Tensor.from_floats([1.7, -1.7, 0.0], device=device)
    assert t.cast("int64").tolist() == [1, -1, 0]
    assert t.cast(DType.BOOL).tolist() == [True, True, False]
    if not float64_supported(device):
        return
    assert t.cast("float64").dtype is DType.FLOAT64
    assert t.int().dtype is DType.INT64 and t.bool().dtype is DType.BOOL
    assert Tensor.from_ints([1], device=device).float().dtype is DType.FLOAT32
    with pytest.raises(DTypeError, match="unknown dtype"):
        t.cast("float8")


def test_tensor_data_roundtrip():
    data = TensorData([1, 2, 3, 4], shape=[2, 2], dtype="float32")
    assert data.shape == [2, 2]
    t = Tensor.from_data(data, device=Device.flex())
    assert t.to_data() == data
    data.assert_approx_eq(TensorData([[1.0, 2.0], [3.0, 4.0000001]]))
    with pytest.raises(AssertionError):
        data.assert_approx_eq(TensorData([[1.0, 2.0], [3.0, 5.0]]))
    with pytest.raises(ShapeError):
        TensorData([1, 2, 3], shape=[2, 2])


def test_pickle_roundtrip(device):
    t = Tensor.from_floats([1.0, 2.0], device=device)
    back = pickle.loads(pickle.dumps(t))
    assert back.device == device and back.tolist() == [1.0, 2.0]


def test_to_device_between_autodiff_and_plain(flex):
    ad = flex.autodiff()
    t = Tensor.from_floats([1.0], device=flex)
    moved = t.to_device(ad)
    assert moved.device == ad
    tracked = moved.require_grad()
    back = tracked.to_device(flex)
    assert back.device == flex and not back.is_require_grad()
    assert_close(back, [1.0])
