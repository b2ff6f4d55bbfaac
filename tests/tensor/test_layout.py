"""Layout ops against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Tensor
from ember.errors import IndexOutOfBoundsError, ShapeError, ValueRangeError
from tests.conftest import assert_close


@pytest.fixture
def data(rng):
    return rng.standard_normal((2, 3, 4)).astype(np.float32)


def test_reshape(device, data):
    t = Tensor.from_data(data, device=device)
    assert_close(t.reshape([6, 4]), data.reshape(6, 4))
    assert_close(t.reshape([-1, 2]), data.reshape(-1, 2))
    assert_close(t.reshape(24), data.reshape(24))
    assert_close(t.flatten(), data.reshape(-1))
    assert_close(t.flatten(1, 2), data.reshape(2, 12))
    with pytest.raises(ShapeError, match="element counts"):
        t.reshape([5, 5])
    with pytest.raises(ShapeError):
        t.reshape([-1, -1])
    with pytest.raises(ShapeError, match="infer"):
        t.reshape([-1, 5])


def test_reshape_with_a_zero_is_a_dim_of_size_zero(device):
    """The book's differences table (docs/tensors.md): a 0 in a shape is a dim of size 0 (PyTorch's meaning),
    not ONNX's "copy this dim"; on a non-empty tensor it raises, never differs silently."""
    empty = Tensor.zeros([0, 3], device=device)
    assert empty.reshape([0, 5, 0]).dims() == [0, 5, 0]
    assert empty.reshape([3, 0]).dims() == [3, 0]
    assert empty.reshape([-1, 6]).dims() == [0, 6]
    with pytest.raises(ShapeError, match=r"cannot become \[0, 3\]"):
        Tensor.ones([2, 3], device=device).reshape([0, 3])


def test_permute_transpose_swap(device, data):
    t = Tensor.from_data(data, device=device)
    assert_close(t.permute([2, 0, 1]), data.transpose(2, 0, 1))
    assert_close(t.permute(2, 0, 1), data.transpose(2, 0, 1))
    assert_close(t.transpose(), data.swapaxes(-1, -2))
    assert_close(t.swap_dims(0, 2), data.swapaxes(0, 2))
    assert_close(t.movedim(0, -1), np.moveaxis(data, 0, -1))
    assert_close(t.flip([0, 2]), data[::-1, :, ::-1])
    assert_close(t.flip(1), data[:, ::-1])
    with pytest.raises(ShapeError):
        t.permute([0, 0, 1])
    with pytest.raises(IndexOutOfBoundsError, match="out of range"):
        t.swap_dims(0, 3)


def test_squeeze_unsqueeze(device):
    t = Tensor.zeros([1, 3, 1], device=device)
    assert t.squeeze().dims() == [3]
    assert t.squeeze_dim(0).dims() == [3, 1]
    assert t.squeeze_dims([0, 2]).dims() == [3]
    assert t.unsqueeze().dims() == [1, 1, 3, 1]
    assert t.unsqueeze_dim(-1).dims() == [1, 3, 1, 1]
    assert t.unsqueeze_dims([0, 4]).dims() == [1, 1, 3, 1, 1]
    with pytest.raises(ShapeError, match="not 1"):
        t.squeeze_dim(1)


def test_expand_repeat(device):
    t = Tensor.from_floats([[1.0], [2.0]], device=device)
    assert t.expand([2, 3]).tolist() == [[1.0] * 3, [2.0] * 3]
    assert t.expand([4, 2, -1]).dims() == [4, 2, 1]
    assert t.repeat_dim(0, 2).tolist() == [[1.0], [2.0], [1.0], [2.0]]
    assert t.repeat_dim(1, 3).tolist() == [[1.0] * 3, [2.0] * 3]
    a = np.arange(6).reshape(2, 3)
    assert Tensor.from_data(a, device=device).repeat([2, 1, 2]).tolist() == np.tile(a, (2, 1, 2)).tolist()
    with pytest.raises(ShapeError, match="cannot be broadcast"):
        t.expand([3, 3])


@pytest.mark.parametrize(
    "key",
    [
        (slice(1, 3),),
        (slice(None), slice(None, None, 2)),
        (0,),
        (-1, slice(None, None, -1)),
        (Ellipsis, 1),
        (None, 0, slice(1, 3)),
        (slice(None, None, -2), Ellipsis, None),
        (1, 2, 3),
        (slice(5, 10),),
        (slice(-2, None), slice(None, -1)),
    ],
    ids=str,
)
def test_getitem_matches_numpy(device, data, key):
    t = Tensor.from_data(data, device=device)
    assert_close(t[key], data[key])


def test_getitem_with_index_list(device, data):
    t = Tensor.from_data(data, device=device)
    assert_close(t[:, [2, 0]], data[:, [2, 0]])
    assert_close(t[Tensor.from_ints([1, 1], device=device)], data[[1, 1]])
    with pytest.raises(IndexOutOfBoundsError):
        t[5]
    with pytest.raises(IndexOutOfBoundsError):
        t[0, 0, 0, 0]
    with pytest.raises(IndexOutOfBoundsError):
        t["a"]


def test_slice_and_slice_assign(device, data):
    t = Tensor.from_data(data, device=device)
    assert_close(t.slice([(0, 1), None, (1, 3)]), data[0:1, :, 1:3])
    assert_close(t.slice([slice(None, None, 2)]), data[::2])
    region = np.ones((1, 3, 2), np.float32)
    out = t.slice_assign([(1, 2), None, (0, 4, 2)], Tensor.from_data(region, device=device))
    expected = data.copy()
    expected[1:2, :, 0:4:2] = region
    assert_close(out, expected)
    assert_close(t, data)  # the original is untouched
    assert_close(t.slice_fill([(0, 1)], 0.0), np.concatenate([np.zeros_like(data[:1]), data[1:]]))
    with pytest.raises(ShapeError, match="does not fit"):
        t.slice_assign([(0, 1)], Tensor.ones([2, 2], device=device))
    with pytest.raises(ValueRangeError):
        t.slice([slice(None, None, 0)])
    with pytest.raises(IndexOutOfBoundsError):
        t.slice([(0, 9)])


def test_setitem_rebinds_handle_only(device):
    a = Tensor.zeros([2, 3], device=device)
    b = a.clone()
    a[0, 1:] = 5.0
    a[1] = Tensor.from_floats([1.0, 2.0, 3.0], device=device)
    assert a.tolist() == [[0.0, 5.0, 5.0], [1.0, 2.0, 3.0]]
    assert b.tolist() == [[0.0] * 3] * 2


def test_narrow_chunk_split(device):
    t = Tensor.arange(10, device=device)
    assert t.narrow(0, 2, 3).tolist() == [2, 3, 4]
    assert [c.tolist() for c in t.chunk(3)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [c.tolist() for c in t.split(4)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [c.tolist() for c in t.split([2, 8])] == [[0, 1], list(range(2, 10))]
    assert len(Tensor.arange(2, device=device).chunk(5)) == 2
    with pytest.raises(IndexOutOfBoundsError):
        t.narrow(0, 8, 5)
    with pytest.raises(ShapeError):
        t.split_with_sizes([3, 3])


def test_cat_stack(device, data):
    a = Tensor.from_data(data, device=device)
    b = Tensor.from_data(data * 2, device=device)
    assert_close(Tensor.cat([a, b], 1), np.concatenate([data, data * 2], 1))
    assert_close(Tensor.stack([a, b], -1), np.stack([data, data * 2], -1))
    mixed = Tensor.cat([Tensor.from_ints([1], device=device), Tensor.from_floats([0.5], device=device)])
    assert mixed.tolist() == [1.0, 0.5]
    with pytest.raises(ShapeError, match="must match"):
        Tensor.cat([a, Tensor.zeros([2, 2, 2], device=device)], 1)
    with pytest.raises(ShapeError):
        Tensor.stack([a, Tensor.zeros([1], device=device)])
    with pytest.raises(ShapeError):
        Tensor.cat([])


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad(device, data, mode):
    t = Tensor.from_data(data, device=device)
    out = t.pad((1, 2, 2, 1), value=-1.0, mode=mode)
    np_mode = {"constant": "constant", "reflect": "reflect", "edge": "edge"}[mode]
    kwargs = {"constant_values": -1.0} if mode == "constant" else {}
    assert_close(out, np.pad(data, ((0, 0), (2, 1), (1, 2)), mode=np_mode, **kwargs))


def test_pad_errors(device, data):
    t = Tensor.from_data(data, device=device)
    with pytest.raises(ShapeError):
        t.pad((1,))
    with pytest.raises(ValueRangeError):
        t.pad((4, 4), mode="reflect")
    with pytest.raises(ValueRangeError):
        t.pad((1, 1), mode="wrap")


def test_tril_triu(device, rng):
    m = rng.standard_normal((2, 4, 5)).astype(np.float32)
    t = Tensor.from_data(m, device=device)
    for k in (-1, 0, 2):
        assert_close(t.tril(k), np.tril(m, k))
        assert_close(t.triu(k), np.triu(m, k))
    with pytest.raises(ShapeError):
        Tensor.ones([3], device=device).tril()
