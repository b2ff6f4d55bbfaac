"""Python's protocols and numbers on tensors raise ember errors (issue 31 items 14, 15),
each also the builtin a Python user catches: ``x.grad`` of something that is not the
``Gradients`` of a backward, ints beyond every dtype, truth values, ``in``, ``len``."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Tensor
from ember.errors import DeviceMemoryError, DTypeError, EmberError, RankError, ScalarOverflowError, ShapeError

BIG = 10**400  # past float64's range: float(BIG) raises OverflowError


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("grad", lambda x, g: x.grad({})),
        ("grad", lambda x, g: x.grad(None)),
        ("grad", lambda x, g: x.grad(x)),
        ("grad_remove", lambda x, g: x.grad_remove({})),
        ("grad_replace", lambda x, g: x.grad_replace({}, x)),
    ],
)
def test_grad_of_something_else_than_gradients_raises(device, name, call):
    if not device.is_autodiff():
        pytest.skip("gradients need an autodiff device")
    x = Tensor.ones([2], device=device).require_grad()
    grads = x.sum().backward()
    with pytest.raises(DTypeError, match=rf"ember: {name}: expected the Gradients that loss.backward\(\) returns"):
        call(x, grads)
    assert x.grad(grads).tolist() == [1.0, 1.0]  # the real Gradients still answer


def test_grad_names_gradients_params_as_the_mistake(device):
    if not device.is_autodiff():
        pytest.skip("gradients need an autodiff device")
    from ember.nn import LinearConfig
    from ember.optim import GradientsParams

    layer = LinearConfig(2, 1).init(device)
    x = Tensor.ones([1, 2], device=device)
    params = GradientsParams.from_grads(layer(x).sum().backward(), layer)
    with pytest.raises(DTypeError, match=r"got GradientsParams; a GradientsParams is keyed by parameter"):
        layer.weight.val().grad(params)


@pytest.mark.parametrize(
    ("op", "call"),
    [
        ("mul", lambda a: a * BIG),
        ("mul", lambda a: BIG * a),
        ("add", lambda a: a + -BIG),
        ("mul", lambda a: a.int() * BIG),
        ("greater", lambda a: a > BIG),
        ("clamp", lambda a: a.clamp(0, BIG)),
        ("powi_scalar", lambda a: a**BIG),
        ("Tensor.full", lambda a: Tensor.full([2], BIG, device=a.device, dtype="float32")),
        ("arange: end", lambda a: Tensor.arange(0.0, BIG, device=a.device)),
    ],
)
def test_ints_beyond_every_dtype_are_overflow_errors(device, op, call):
    a = Tensor.ones([2, 2], device=device)
    with pytest.raises(ScalarOverflowError, match=rf"ember: {op}: the scalar -?100000\.\.\.\(401 digits\) is beyond"):
        call(a)
    assert issubclass(ScalarOverflowError, OverflowError) and issubclass(ScalarOverflowError, ValueError)


def test_large_ints_within_float64_still_give_inf(device):
    """As numpy's float32 (PyTorch refuses any int past int64 as a scalar)."""
    a = Tensor.ones([2], device=device)
    expected = (np.ones(2, np.float32) * np.float32(np.inf)).tolist()
    with np.errstate(over="ignore"):
        assert (a * 10**300).tolist() == expected == [float("inf")] * 2


@pytest.mark.parametrize(
    "call",
    [
        lambda d: Tensor.arange(-(2**62), 2**62, device=d),
        lambda d: Tensor.arange(0, 2**62, device=d, dtype="float32"),
        lambda d: Tensor.arange(-1e308, 1e308, 1e-300, device=d),
        lambda d: Tensor.linspace(0, 1, 2**50, device=d),
    ],
)
def test_ranges_no_machine_holds_are_memory_errors(device, call):
    with pytest.raises(DeviceMemoryError, match=r"ember: Tensor\.(arange|linspace): "):
        call(device)


def test_truth_value_len_and_index_are_ember_errors(device):
    t = Tensor.ones([2, 2], device=device)
    with pytest.raises(ShapeError, match=r"the truth value of a tensor with shape \[2, 2\] is ambiguous"):
        bool(t)
    scalar = t.sum().reshape([])
    with pytest.raises(RankError, match=r"len\(\) of a rank-0 tensor"):
        len(scalar)
    with pytest.raises(TypeError):  # also the builtin Python raises for len() of an unsized object
        len(scalar)
    with pytest.raises(DTypeError, match="only an int tensor with one element can be used as an index, got float32"):
        [0, 1][scalar]
    assert [0, 1, 2][scalar.int().sub_scalar(3)] == 1
    for error in (ShapeError, RankError, DTypeError):
        assert issubclass(error, EmberError)


@pytest.mark.parametrize(
    ("element", "data"),
    [
        (1.0, [[1.0, 2.0], [3.0, 4.0]]),
        (5, [[1.0, 2.0], [3.0, 4.0]]),
        (float("nan"), [[float("nan"), 2.0]]),
        (2, [[1, 2], [3, 4]]),
        (2.5, [[1, 2], [3, 4]]),
        (True, [[0.0, 1.0]]),
        ([3.0, 4.0], [[1.0, 2.0], [3.0, 4.0]]),
        ([4.0, 3.0], [[1.0, 2.0], [5.0, 6.0]]),
        (1.0, []),
        (7.0, 7.0),
    ],
)
def test_in_follows_torch(device, torch, element, data):
    ours = Tensor.from_data(data, device=device) if data != [] else Tensor.zeros([0], device=device)
    theirs = torch.tensor(data) if data != [] else torch.zeros(0)
    if isinstance(element, list):
        assert (Tensor.from_data(element, device=device) in ours) == (torch.tensor(element) in theirs)
    else:
        assert (element in ours) == (element in theirs)


def test_in_refuses_other_things(device):
    with pytest.raises(DTypeError, match=r"`in`: a tensor contains numbers or tensors .* got str"):
        "x" in Tensor.ones([2], device=device)  # noqa: B015
