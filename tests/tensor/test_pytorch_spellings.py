"""A PyTorch user's spellings: the reductions that take a dim in PyTorch raise an
error naming Burn's form and the PyTorch-shaped equivalent (and both work as the
message says); ``size``, ``masked_fill``, ``softmax``, ``log_softmax`` and
``argmax(dim, keepdim=False)`` exist with PyTorch's meaning; attribute names from
PyTorch name ember's."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Tensor
from ember.errors import EmberError, UsageError


def message_of(fn, *args, **kwargs) -> str:
    with pytest.raises(UsageError) as info:
        fn(*args, **kwargs)
    return str(info.value)


@pytest.fixture
def x():
    return Tensor.from_data(np.arange(24, dtype=np.float32).reshape(2, 3, 4))


@pytest.mark.parametrize("name", ["sum", "mean", "prod", "max", "min", "any", "all"])
@pytest.mark.parametrize("call", ["positional", "keyword"])
def test_reduction_with_a_dim_names_both_forms(x, name, call):
    with pytest.raises(UsageError) as info:
        getattr(x, name)(-1) if call == "positional" else getattr(x, name)(dim=-1)
    message = str(info.value)
    assert isinstance(info.value, TypeError) and isinstance(info.value, EmberError)
    assert f"x.{name}_dim(-1)" in message and "shape [2, 3, 1]" in message  # Burn's form, dim kept
    assert "shape [2, 3]" in message  # the PyTorch-shaped equivalent
    assert "{d}" not in message


@pytest.mark.parametrize("name", ["sum", "mean", "prod", "max", "min"])
def test_the_suggested_spellings_give_pytorchs_values(x, name, torch):
    """Each spelling the message suggests runs and gives torch's result."""
    message = message_of(getattr(x, name), 1)
    squeezed = message.split(", or ")[1].split(" for PyTorch's")[0]
    got = eval(squeezed, {"x": x}).to_numpy()
    t = torch.from_numpy(x.to_numpy())
    expected = getattr(t, name)(1)
    expected = expected if isinstance(expected, torch.Tensor) else expected[0]  # (values, indices)
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-6)
    kept = eval(f"x.{name}_dim(1)", {"x": x}).to_numpy()
    np.testing.assert_allclose(kept, expected.numpy()[:, None, :], rtol=1e-6)


def test_keepdim_and_several_dims(x):
    message = message_of(x.mean, 1, keepdim=True)
    assert "x.mean_dim(1)" in message and "keepdim=True" in message
    message = message_of(x.sum, (0, 2))
    assert "x.sum_dims([0, 2])" in message and "x.sum_dims_squeeze([0, 2])" in message
    message = message_of(x.sum, 7)
    assert "dim 7 is not a dim" in message and "[2, 3, 4]" in message


def test_full_reductions_keep_working(x):
    assert x.sum().dims() == [1] and x.sum().into_scalar() == 276.0
    assert x.max().into_scalar() == 23.0 and x.any().into_scalar() is True


def test_argmax_keepdim(x, torch):
    t = torch.from_numpy(x.to_numpy())
    assert x.argmax(2).dims() == [2, 3, 1]  # Burn's shape by default
    np.testing.assert_array_equal(x.argmax(2, keepdim=False).to_numpy(), t.argmax(2).numpy())
    np.testing.assert_array_equal(x.argmin(0, keepdim=False).to_numpy(), t.argmin(0).numpy())
    assert x.argmax().dims() == [1] and x.argmax().into_scalar() == 23


def test_size(x):
    assert x.size() == x.shape and list(x.size()) == [2, 3, 4]
    assert x.size(0) == 2 and x.size(-1) == 4
    with pytest.raises(IndexError):
        x.size(3)


def test_masked_fill_as_pytorch(x, torch):
    mask = x.greater_elem(10.0)
    t = torch.from_numpy(x.to_numpy())
    tm = torch.from_numpy(mask.to_numpy())
    np.testing.assert_array_equal(x.masked_fill(mask, -1.0).to_numpy(), t.masked_fill(tm, -1.0).numpy())
    np.testing.assert_array_equal(
        x.masked_fill(mask, Tensor.from_floats([5.0])).to_numpy(), t.masked_fill(tm, torch.tensor(5.0)).numpy()
    )
    with pytest.raises(EmberError, match="one-element"):
        x.masked_fill(mask, Tensor.from_floats([1.0, 2.0]))


def test_softmax_methods(x, torch):
    t = torch.from_numpy(x.to_numpy()) / 7
    y = x.div_scalar(7.0)
    np.testing.assert_allclose(y.softmax(-1).to_numpy(), t.softmax(-1).numpy(), rtol=1e-6)
    np.testing.assert_allclose(y.log_softmax(1).to_numpy(), t.log_softmax(1).numpy(), rtol=1e-6, atol=1e-6)


def test_bool_mask_indexing(x, torch):
    mask = x.greater_elem(10.0)
    t = torch.from_numpy(x.to_numpy())
    np.testing.assert_array_equal(x[mask].to_numpy(), t[torch.from_numpy(mask.to_numpy())].numpy())


@pytest.mark.parametrize(
    "name, hint",
    [
        ("numpy", "x.to_numpy()"),
        ("t", "x.transpose()"),
        ("dim", "x.rank"),
        ("to", "x.to_device(device)"),
        ("long", "x.int()"),
    ],
)
def test_pytorch_attribute_names_point_to_embers(x, name, hint):
    with pytest.raises(AttributeError, match="a PyTorch name") as info:
        getattr(x, name)
    assert hint in str(info.value)
    # every suggestion names something that exists
    head = hint.split("(")[0].split(".")[1]
    assert hasattr(x, head)


def test_other_missing_attributes_stay_plain(x):
    with pytest.raises(AttributeError, match="no attribute 'frobnicate'"):
        x.frobnicate
    assert getattr(x, "frobnicate", 7) == 7
