"""The ops of issue 19 beyond the PyTorch comparisons of ``test_op_suite.py``:
gradients against float64 finite differences, edge values against float64 numpy or
PyTorch, numpy's advanced indexing on random keys, and the errors for bad calls."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember import Device, DType, Tensor
from ember.errors import DTypeError, IndexOutOfBoundsError, ShapeError, ValueRangeError
from ember.tensor.interpolate import interpolate
from tests.autodiff.gradcheck import check_grad
from tests.conftest import assert_close, float64_supported


def _cases():
    r = np.random.default_rng(19)

    def rand(*shape, lo=-2.0, hi=2.0):
        return r.uniform(lo, hi, size=shape)

    # ---------------------------------------------------------------------------------- gradients (float64)
    return {
        "log2": (lambda x: x.log2(), [rand(3, 4, lo=0.2, hi=4)]),
        "log10": (lambda x: x.log10(), [rand(3, 4, lo=0.2, hi=4)]),
        "exp2": (lambda x: x.exp2(), [rand(3, 4)]),
        "asinh": (lambda x: x.asinh(), [rand(3, 4, lo=-4, hi=4)]),
        "acosh": (lambda x: x.acosh(), [rand(3, 4, lo=1.2, hi=4)]),
        "atanh": (lambda x: x.atanh(), [rand(3, 4, lo=-0.9, hi=0.9)]),
        "copysign": (lambda x, y: x.copysign(y), [rand(3, 4), rand(3, 4)]),
        "hypot": (lambda x, y: x.hypot(y), [rand(3, 4), rand(3, 4)]),
        "fmod": (lambda x, y: x.fmod(y), [rand(3, 4, lo=-5, hi=5), rand(3, 4, lo=0.7, hi=1.3)]),
        "logaddexp": (lambda x, y: x.logaddexp(y), [rand(3, 4), rand(3, 4)]),
        "lerp": (lambda x, y, w: x.lerp(y, w), [rand(3, 4), rand(3, 4), rand(3, 4, lo=0, hi=1)]),
        "xlogy": (lambda x, y: x.xlogy(y), [rand(3, 4), rand(3, 4, lo=0.2, hi=3)]),
        "logcumsumexp": (lambda x: x.logcumsumexp(1), [rand(3, 5, lo=-30, hi=3)]),
        "median": (lambda x: x.median(1), [rand(3, 5)]),
        "var_correction": (lambda x: x.var(1, correction=2.5), [rand(3, 6)]),
        "cummax_values": (lambda x: x.cummax_with_indices(1)[0], [rand(3, 6)]),
        "diagonal": (lambda x: x.diagonal(1, 0, 2), [rand(3, 2, 4)]),
        "diag": (lambda x: x.diag(-1), [rand(4)]),
        "unfold": (lambda x: x.unfold(1, 3, 2), [rand(2, 7)]),
        "roll": (lambda x: x.roll((2, -1), (0, 1)), [rand(3, 4)]),
        "repeat_interleave": (
            lambda x: x.repeat_interleave(Tensor.from_ints([2, 0, 3], device=x.device), 0),
            [rand(3, 2)],
        ),
        "pad_reflect": (lambda x: x.pad((2, 1), mode="reflect"), [rand(2, 5)]),
        "pad_circular": (lambda x: x.pad((3, -1), mode="circular"), [rand(2, 5)]),
        "advanced_getitem": (lambda x: x[[0, 2, 2], :, [1, 0, 1]], [rand(3, 2, 4)]),
        "mask_getitem": (
            lambda x: x[Tensor.from_data(np.array([[True, False, True], [False, True, True]]), device=x.device)],
            [rand(2, 3)],
        ),
        "scatter_assign": (
            lambda x, v: x.scatter(1, Tensor.from_ints([[2, 0], [1, 1]], device=x.device), v, "assign"),
            [rand(2, 3), rand(2, 2)],
        ),
        "scatter_prod": (
            lambda x, v: x.scatter_reduce(1, Tensor.from_ints([[2, 0, 2], [1, 1, 0]], device=x.device), v, "prod"),
            [rand(2, 3), rand(2, 3)],
        ),
        "scatter_mean": (
            lambda x, v: x.scatter_reduce(
                0, Tensor.from_ints([[1, 0], [1, 1]], device=x.device), v, "mean", include_self=False
            ),
            [rand(2, 2), rand(2, 2)],
        ),
        "einsum": (lambda a, b: Tensor.einsum("bij,jk->bki", a, b), [rand(2, 3, 4), rand(4, 5)]),
        "einsum_trace": (lambda a: Tensor.einsum("ii", a), [rand(3, 3)]),
        "bicubic": (lambda x: interpolate(x, size=(5, 4), mode="bicubic"), [rand(1, 1, 3, 3)]),
        "bilinear_align": (
            lambda x: interpolate(x, scale_factor=1.7, mode="bilinear", align_corners=True),
            [rand(1, 2, 3, 2)],
        ),
    }


GRADIENTS = _cases()


@pytest.mark.parametrize("name", sorted(GRADIENTS))
def test_gradients_match_finite_differences(name):
    fn, arrays = GRADIENTS[name]
    check_grad(fn, arrays, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("checkpointing", ["DISABLED", "BALANCED"])
def test_new_primitives_differentiate_under_both_checkpointing_modes(checkpointing, rng):
    from ember.backend.autodiff.checkpoint import Checkpointing

    device = Device.flex().autodiff(getattr(Checkpointing, checkpointing))
    check_grad(
        lambda x: x.asinh().mul(x.exp2()).log10().logcumsumexp(0), [rng.uniform(0.5, 2.0, size=(4, 3))], device=device
    )


# ---------------------------------------------------------------------------------- edge values
EDGE = np.array([0.0, -0.0, 1e-8, -1e-8, 0.5, -0.5, 1.0, -1.0, 1.5, 8.0, 1e20, -1e20, np.inf, -np.inf, np.nan])


@pytest.mark.parametrize("name", ["log2", "log10", "exp2", "asinh", "acosh", "atanh"])
def test_primitive_edge_values(device, torch, name):
    x = EDGE.astype(np.float32)
    out = getattr(Tensor.from_data(x, device=device), name)().to_numpy()
    expected = getattr(torch, name)(torch.from_numpy(x.astype(np.float64))).numpy()
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(expected))
    np.testing.assert_array_equal(out[np.isinf(expected)], expected[np.isinf(expected)])
    np.testing.assert_allclose(
        out[finite], expected[finite], rtol=2e-6, atol=1e-12 if device.backend_name == "flex" else 1e-7
    )


def test_float64_precision_on_flex(flex):
    x = np.array([1e-10, 0.3, 0.999999, 7.0, 1e200])
    t = Tensor.from_data(x, device=flex)
    assert_close(t.asinh(), np.arcsinh(x), rtol=1e-15, atol=0)
    assert_close(t.log10(), np.log10(x), rtol=1e-15, atol=0)
    assert Tensor.from_data([1000.0, 1e-5], device=flex).log10().tolist() == [3.0, -5.0]


def test_logcumsumexp_is_stable_where_a_shift_by_the_maximum_underflows(device):
    x = np.array([[-1000.0, 0.0, -1000.0, 50.0]], dtype=np.float32)
    out = Tensor.from_data(x, device=device).logcumsumexp(1).to_numpy()
    expected = np.logaddexp.accumulate(x.astype(np.float64), axis=1)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_int_division_rounding_modes_against_python(device):
    a = np.arange(-7, 8).repeat(4)
    b = np.tile([-3, -2, 2, 3], 15)
    ta, tb = Tensor.from_data(a, device=device), Tensor.from_data(b, device=device)
    trunc = ta.div(tb, rounding_mode="trunc")
    assert trunc.dtype is DType.INT64
    assert trunc.tolist() == [int(x / y) for x, y in zip(a, b)]
    assert ta.div(tb, rounding_mode="floor").tolist() == [x // y for x, y in zip(a, b)]
    assert ta.fmod(tb).tolist() == [int(math.fmod(x, y)) for x, y in zip(a, b)]


def test_hypot_does_not_overflow_or_underflow(device):
    big = Tensor.from_floats([3e30, 3e-30], device=device)
    out = big.hypot(Tensor.from_floats([4e30, 4e-30], device=device)).to_numpy()
    np.testing.assert_allclose(out, [5e30, 5e-30], rtol=1e-6)


def test_fmod_keeps_the_dividend_sign_exactly(device):
    x = Tensor.from_floats([-1e-10, 5.5, -5.5, -0.0], device=device)
    out = x.fmod(2.0).to_numpy()
    np.testing.assert_array_equal(out, np.fmod(np.float32([-1e-10, 5.5, -5.5, -0.0]), np.float32(2.0)))
    assert np.signbit(out[3])


def test_median_and_cummax_indices_point_at_their_values(device):
    x = np.array([[3.0, 1.0, 3.0, 2.0, 1.0], [5.0, 5.0, 4.0, 4.0, 6.0]], dtype=np.float32)
    t = Tensor.from_data(x, device=device)
    values, indices = t.median_with_indices(1)
    assert values.tolist() == [[2.0], [5.0]]
    assert t.gather(1, indices).tolist() == values.tolist()
    running, where = t.cummax_with_indices(1)
    assert where.tolist() == [[0, 0, 2, 2, 2], [0, 1, 1, 1, 4]]
    assert running.tolist() == np.maximum.accumulate(x, axis=1).tolist()


# ---------------------------------------------------------------------------------- numpy's advanced indexing
def _key(draw, shape):
    """A random numpy-style key of ints, slices, None, ... and index lists."""
    parts = []
    for n in shape:
        kind = draw(st.sampled_from(["slice", "int", "list", "mask", "full"]))
        if kind == "int":
            parts.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            step = draw(st.sampled_from([1, 2, -1, -2]))
            parts.append(slice(draw(st.integers(-n, n)), draw(st.integers(-n, n)), step))
        elif kind == "list":
            parts.append(draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=3)))
        elif kind == "mask":
            parts.append(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
        else:
            parts.append(slice(None))
    if draw(st.booleans()):
        parts.insert(draw(st.integers(0, len(parts))), None)
    return tuple(parts)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_getitem_and_setitem_follow_numpy(flex, data):
    shape = (3, 4, 2)
    x = np.arange(24, dtype=np.float32).reshape(shape)
    key = _key(data.draw, shape)
    np_key = tuple(np.array(k) if isinstance(k, list) else k for k in key)
    lists = [np.array(k) for k in key if isinstance(k, list) and k and not isinstance(k[0], bool)]
    try:
        np.broadcast_shapes(*[k.shape for k in lists])
        expected = x[np_key]
    except (IndexError, ValueError):
        with pytest.raises((IndexError, ValueError)):
            Tensor.from_data(x, device=flex)[key]
        return
    t = Tensor.from_data(x, device=flex)
    out = t[key]
    assert out.dims() == list(expected.shape)
    np.testing.assert_array_equal(out.to_numpy(), expected)
    y = x.copy()
    y[np_key] = -1.0
    t[key] = -1.0
    np.testing.assert_array_equal(t.to_numpy(), y)


def test_setitem_with_repeated_indices_keeps_the_last_value(device):
    t = Tensor.zeros([4], device=device)
    t[[1, 3, 1]] = Tensor.from_floats([5.0, 6.0, 7.0], device=device)
    assert t.tolist() == [0.0, 7.0, 0.0, 6.0]


def test_setitem_with_a_mask_keeps_the_dtype_and_other_handles(device):
    t = Tensor.from_ints([[1, -2], [-3, 4]], device=device)
    before = t.clone()
    t[t < 0] = 0
    assert t.tolist() == [[1, 0], [0, 4]] and t.dtype is DType.INT64
    assert before.tolist() == [[1, -2], [-3, 4]]
    u = Tensor.zeros([2, 3], device=device)
    u[Tensor.from_bools([True, False], device=device)] = Tensor.from_floats([1.0, 2.0, 3.0], device=device)
    assert u.tolist() == [[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]


# ---------------------------------------------------------------------------------- errors
ERRORS = [
    (lambda t: t.div(t, rounding_mode="round"), ValueRangeError, ["div", "rounding_mode"]),
    (
        lambda t: t.scatter(0, Tensor.from_ints([[0, 1, 0]], device=t.device), t[:1], "replace"),
        ValueRangeError,
        ["scatter", "assign"],
    ),
    (
        lambda t: t.scatter_reduce(0, Tensor.from_ints([[0, 1, 0]], device=t.device), t[:1], "max"),
        ValueRangeError,
        ["scatter_reduce", "amax"],
    ),
    (lambda t: Tensor.einsum("ij,jk->ik", t, t), ShapeError, ["einsum", "sizes"]),
    (lambda t: Tensor.einsum("ij->k", t), ValueRangeError, ["einsum", "k"]),
    (lambda t: Tensor.einsum("i1->i", t), ValueRangeError, ["einsum", "letters"]),
    (lambda t: Tensor.einsum("ijk->i", t), ShapeError, ["einsum", "rank"]),
    (
        lambda t: interpolate(t.reshape([1, 1, 2, 3]), size=4, mode="linear"),
        ShapeError,
        ["interpolate", "linear", "1 spatial"],
    ),
    (
        lambda t: interpolate(t.reshape([1, 1, 2, 3]), size=4, scale_factor=2.0),
        ValueRangeError,
        ["interpolate", "exactly one"],
    ),
    (lambda t: interpolate(t.reshape([1, 1, 2, 3]), size=4, align_corners=True), ValueRangeError, ["align_corners"]),
    (lambda t: t.pad((1, 1), mode="wrap"), ValueRangeError, ["pad", "circular"]),
    (lambda t: t.pad((4, 0), mode="circular"), ValueRangeError, ["pad", "wraps"]),
    (lambda t: t.pad((-2, -2)), ValueRangeError, ["pad", "crops"]),
    (lambda t: t.unfold(1, 5, 1), ValueRangeError, ["unfold", "size"]),
    (lambda t: t.roll([1, 2], [0]), ShapeError, ["roll", "one length"]),
    (lambda t: t.movedim([0, 1], [1]), ShapeError, ["movedim"]),
    (lambda t: t.repeat_interleave([1, 2, 3], 0), ShapeError, ["repeat_interleave", "one count"]),
    (lambda t: t.diagonal(0, 1, 1), ShapeError, ["diagonal", "repeat"]),
    (lambda t: t.narrow(0, 0, 0).median(0), ShapeError, ["median", "empty"]),
    (lambda t: t.kthvalue(4, 1), ValueRangeError, ["kthvalue"]),
    (lambda t: t.is_close(t, rtol=-1.0), ValueRangeError, ["is_close"]),
    (lambda t: t[..., ...], IndexOutOfBoundsError, ["Ellipsis"]),
    (lambda t: t[0, 0, 0], IndexOutOfBoundsError, ["3 indices", "rank-2"]),
    (lambda t: t[[0, 1], [0, 1, 2]], ShapeError, ["broadcast"]),
    (lambda t: t.linspace(0, 1, -1), ValueRangeError, ["linspace", "steps"]),
    (lambda t: Tensor.meshgrid(t, indexing="yx"), ValueRangeError, ["meshgrid", "indexing"]),
    (lambda t: Tensor.diag_mask([2, 2, 2]), ShapeError, ["diag_mask"]),
    (lambda t: t.bool().fmod(1), DTypeError, ["fmod", "bool"]),
]


@pytest.mark.parametrize("call, error, words", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_bad_calls_raise_clear_errors(flex, call, error, words):
    t = Tensor.from_floats([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], device=flex)
    with pytest.raises(error) as caught:
        call(t)
    message = str(caught.value)
    assert message.startswith("ember: ")
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


def test_float64_ops_raise_a_clear_error_on_cube(device):
    if float64_supported(device):
        assert Tensor.linspace(0, 1, 3, device=device, dtype="float64").dtype is DType.FLOAT64
