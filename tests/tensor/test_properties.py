"""Property tests (hypothesis): broadcasting, slicing and layout against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ember import Device, Tensor
from ember.errors import ShapeError

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
DEVICES = [Device.flex(), Device.flex().autodiff()]
floats = st.floats(-100, 100, allow_nan=False, width=32)


@pytest.mark.parametrize("device", DEVICES, ids=str)
@SETTINGS
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=4), data=st.data())
def test_broadcasting_binary_ops(device, shapes, data):
    a = data.draw(hnp.arrays(np.float32, shapes.input_shapes[0], elements=floats))
    b = data.draw(hnp.arrays(np.float32, shapes.input_shapes[1], elements=floats))
    ta, tb = Tensor.from_data(a, device=device), Tensor.from_data(b, device=device)
    for ours, theirs in (
        (ta.add(tb), a + b),
        (ta.mul(tb), a * b),
        (ta.maximum(tb), np.maximum(a, b)),
        (ta.greater(tb), a > b),
    ):
        assert ours.dims() == list(shapes.result_shape)
        np.testing.assert_array_equal(ours.to_numpy(), theirs)


@SETTINGS
@given(
    a=hnp.array_shapes(min_dims=1, max_dims=3, max_side=4),
    b=hnp.array_shapes(min_dims=1, max_dims=3, max_side=4),
)
def test_incompatible_shapes_raise_shape_error(a, b):
    try:
        expected = np.broadcast_shapes(a, b)
    except ValueError:
        expected = None
    ta, tb = Tensor.zeros(a, device=Device.flex()), Tensor.zeros(b, device=Device.flex())
    if expected is None:
        with pytest.raises(ShapeError):
            ta.add(tb)
    else:
        assert ta.add(tb).dims() == list(expected)


def _index_strategy(shape):
    def one(n):
        return st.one_of(
            st.integers(-n, n - 1) if n else st.just(slice(None)),
            st.builds(
                slice,
                st.none() | st.integers(-n - 2, n + 2),
                st.none() | st.integers(-n - 2, n + 2),
                st.none() | st.integers(-3, 3).filter(lambda s: s != 0),
            ),
        )

    return st.tuples(*[one(n) for n in shape])


@pytest.mark.parametrize("device", DEVICES, ids=str)
@SETTINGS
@given(shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=5), data=st.data())
def test_slicing_matches_numpy(device, shape, data):
    array = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    key = data.draw(_index_strategy(shape))
    ours = Tensor.from_data(array, device=device)[key]
    np.testing.assert_array_equal(ours.to_numpy(), array[key])


@SETTINGS
@given(shape=hnp.array_shapes(min_dims=1, max_dims=4, max_side=4), data=st.data())
def test_layout_ops_match_numpy(shape, data):
    array = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    t = Tensor.from_data(array, device=Device.flex())
    perm = data.draw(st.permutations(range(len(shape))))
    np.testing.assert_array_equal(t.permute(perm).to_numpy(), array.transpose(perm))
    dims = data.draw(st.lists(st.integers(0, len(shape) - 1), unique=True))
    np.testing.assert_array_equal(t.flip(dims).to_numpy(), np.flip(array, dims) if dims else array)
    np.testing.assert_array_equal(t.reshape([-1]).to_numpy(), array.reshape(-1))
    dim = data.draw(st.integers(0, len(shape) - 1))
    times = data.draw(st.integers(0, 3))
    np.testing.assert_array_equal(
        t.repeat_dim(dim, times).to_numpy(),
        np.concatenate([array] * times, dim)
        if times
        else np.zeros([0 if d == dim else n for d, n in enumerate(shape)]),
    )
    np.testing.assert_array_equal(Tensor.cat([t, t], dim).to_numpy(), np.concatenate([array, array], dim))
    np.testing.assert_array_equal(Tensor.stack([t, t], dim).to_numpy(), np.stack([array, array], dim))
    np.testing.assert_array_equal(t.sum_dim(dim).to_numpy(), array.sum(dim, keepdims=True))
    np.testing.assert_array_equal(t.unsqueeze_dim(dim).squeeze_dim(dim).to_numpy(), array)
