"""Elementwise ops against float64 numpy, on every device."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from ember import DType, Tensor
from tests.conftest import assert_close, float64_supported

_erf = np.vectorize(math.erf)

# name: (ember call, numpy oracle, domain low, high)
UNARY = {
    "neg": (lambda t: t.neg(), np.negative, -3, 3),
    "abs": (lambda t: t.abs(), np.abs, -3, 3),
    "exp": (lambda t: t.exp(), np.exp, -3, 3),
    "log": (lambda t: t.log(), np.log, 0.1, 5),
    "log1p": (lambda t: t.log1p(), np.log1p, -0.5, 3),
    "expm1": (lambda t: t.expm1(), np.expm1, -2, 2),
    "sqrt": (lambda t: t.sqrt(), np.sqrt, 0.1, 5),
    "rsqrt": (lambda t: t.rsqrt(), lambda x: 1 / np.sqrt(x), 0.1, 5),
    "recip": (lambda t: t.recip(), lambda x: 1 / x, 0.5, 3),
    "square": (lambda t: t.square(), np.square, -3, 3),
    "sin": (lambda t: t.sin(), np.sin, -3, 3),
    "cos": (lambda t: t.cos(), np.cos, -3, 3),
    "tan": (lambda t: t.tan(), np.tan, -1, 1),
    "tanh": (lambda t: t.tanh(), np.tanh, -3, 3),
    "sinh": (lambda t: t.sinh(), np.sinh, -2, 2),
    "cosh": (lambda t: t.cosh(), np.cosh, -2, 2),
    "asin": (lambda t: t.asin(), np.arcsin, -0.9, 0.9),
    "acos": (lambda t: t.acos(), np.arccos, -0.9, 0.9),
    "atan": (lambda t: t.atan(), np.arctan, -3, 3),
    "erf": (lambda t: t.erf(), _erf, -3, 3),
    "sign": (lambda t: t.sign(), np.sign, -3, 3),
    "round": (lambda t: t.round(), np.round, -3, 3),
    "floor": (lambda t: t.floor(), np.floor, -3, 3),
    "ceil": (lambda t: t.ceil(), np.ceil, -3, 3),
    "trunc": (lambda t: t.trunc(), np.trunc, -3, 3),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float32(device, rng, name):
    call, oracle, lo, hi = UNARY[name]
    x = rng.uniform(lo, hi, size=(3, 5)).astype(np.float32)
    out = call(Tensor.from_data(x, device=device))
    assert out.dtype is DType.FLOAT32
    assert_close(out, oracle(x.astype(np.float64)), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float64_exact(flex, rng, name):
    call, oracle, lo, hi = UNARY[name]
    x = rng.uniform(lo, hi, size=(4, 3))
    out = call(Tensor.from_data(x, device=flex))
    assert out.dtype is DType.FLOAT64
    assert_close(out, oracle(x), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "tanh", "erf", "sin"])
def test_unary_half_precision(flex, rng, name, dtype):
    call, oracle, lo, hi = UNARY[name]
    x = rng.uniform(lo, hi, size=(8,)).astype(np.float32)
    t = Tensor.from_data(x, device=flex).cast(dtype)
    out = call(t)
    assert out.dtype is DType.parse(dtype)
    reference = oracle(t.cast("float64").to_numpy())
    assert_close(out.cast("float64"), reference, rtol=2e-2 if dtype == "bfloat16" else 2e-3, atol=1e-3)


def test_float_ops_on_ints_give_float32(device):
    t = Tensor.from_ints([1, 4, 9], device=device)
    out = t.sqrt()
    assert out.dtype is DType.FLOAT32
    assert_close(out, [1.0, 2.0, 3.0])


def test_integer_rounding_is_identity(device):
    t = Tensor.from_ints([1, -2], device=device)
    assert t.round().dtype is DType.INT64
    assert t.floor().tolist() == [1, -2]


BINARY = {
    "add": (lambda a, b: a.add(b), np.add),
    "sub": (lambda a, b: a.sub(b), np.subtract),
    "mul": (lambda a, b: a.mul(b), np.multiply),
    "div": (lambda a, b: a.div(b), np.divide),
    "remainder": (lambda a, b: a.remainder(b), np.remainder),
    "powf": (lambda a, b: a.abs().powf(b), lambda a, b: np.abs(a) ** b),
    "atan2": (lambda a, b: a.atan2(b), np.arctan2),
    "maximum": (lambda a, b: a.maximum(b), np.maximum),
    "minimum": (lambda a, b: a.minimum(b), np.minimum),
    "floor_div": (lambda a, b: a.floor_div(b), np.floor_divide),
}

# The last pair is long enough to take the GPU backend's multi-workgroup paths.
SHAPE_PAIRS = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((1,), (2, 3)), ((), (2,)), ((70, 5), (70, 1))]


@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_broadcasting(device, rng, name, shapes):
    call, oracle = BINARY[name]
    a = rng.uniform(-3, 3, size=shapes[0]).astype(np.float32)
    b = (rng.uniform(0.5, 3, size=shapes[1]) * rng.choice([-1, 1], size=shapes[1])).astype(np.float32)
    out = call(Tensor.from_data(a, device=device), Tensor.from_data(b, device=device))
    assert_close(out, oracle(a.astype(np.float64), b.astype(np.float64)), rtol=3e-5, atol=3e-5)


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "remainder", "powf"])
def test_scalar_forms(device, rng, name):
    a = rng.uniform(0.5, 3, size=(2, 3)).astype(np.float32)
    t = Tensor.from_data(a, device=device)
    method = {"powf": "powf_scalar"}.get(name, name + "_scalar")
    out = getattr(t, method)(1.5)
    oracle = BINARY[name][1]
    assert out.dtype is DType.FLOAT32
    assert_close(out, oracle(a.astype(np.float64), 1.5), rtol=3e-6)


def test_python_operators(device):
    a = Tensor.from_floats([1.0, 2.0, 4.0], device=device)
    assert (a + 1).tolist() == [2.0, 3.0, 5.0]
    assert (1 + a).tolist() == [2.0, 3.0, 5.0]
    assert (10 - a).tolist() == [9.0, 8.0, 6.0]
    assert (a - 1).tolist() == [0.0, 1.0, 3.0]
    assert (a * a).tolist() == [1.0, 4.0, 16.0]
    assert (2 / a).tolist() == [2.0, 1.0, 0.5]
    assert (a / 2).tolist() == [0.5, 1.0, 2.0]
    assert (a**2).tolist() == [1.0, 4.0, 16.0]
    assert (2**a).tolist() == [2.0, 4.0, 16.0]
    assert (-a).tolist() == [-1.0, -2.0, -4.0]
    assert (a % 3).tolist() == [1.0, 2.0, 1.0]
    assert (a // 3).tolist() == [0.0, 0.0, 1.0]
    assert abs(-a).tolist() == [1.0, 2.0, 4.0]
    m = Tensor.from_floats([[1.0, 2.0], [3.0, 4.0]], device=device)
    assert (m @ m).tolist() == [[7.0, 10.0], [15.0, 22.0]]


def test_int_arithmetic_and_promotion(device):
    i = Tensor.from_ints([1, 2, 3], device=device)
    f = Tensor.from_floats([0.5, 0.5, 0.5], device=device)
    assert (i + 1).dtype is DType.INT64
    assert (i + 1).tolist() == [2, 3, 4]
    assert (i + 0.5).dtype is DType.FLOAT32
    assert (i + f).dtype is DType.FLOAT32
    assert (i / 2).tolist() == [0.5, 1.0, 1.5]
    assert (i // 2).tolist() == [0, 1, 1]
    assert Tensor.from_ints([-7], device=device).remainder(3).tolist() == [2]
    assert i.powi_scalar(2).tolist() == [1, 4, 9]
    assert i.powi_scalar(2).dtype is DType.INT64
    i32 = Tensor.from_ints([1, 2], device=device, dtype="int32")
    assert (i32 + Tensor.from_ints([1, 1], device=device)).dtype is DType.INT64
    if not float64_supported(device):
        return
    f64 = Tensor.from_floats([1.0, 2.0], device=device, dtype="float64")
    assert (f64 + Tensor.from_floats([1.0, 1.0], device=device)).dtype is DType.FLOAT64
    b = Tensor.from_bools([True, False], device=device)
    assert (b + b).dtype is DType.BOOL and (b + 1).dtype is DType.INT64


def test_clamp(device):
    t = Tensor.from_floats([-2.0, 0.5, 3.0, float("nan")], device=device)
    assert_close(t.clamp(-1.0, 1.0), [-1.0, 0.5, 1.0, np.nan])
    assert_close(t.clamp_min(0.0), [0.0, 0.5, 3.0, np.nan])
    assert_close(t.clamp_max(0.0), [-2.0, 0.0, 0.0, np.nan])
    assert Tensor.from_ints([-5, 5], device=device).clamp(-1, 1).tolist() == [-1, 1]


def test_is_nan_inf(device):
    t = Tensor.from_floats([1.0, float("nan"), float("inf"), -float("inf")], device=device)
    assert t.is_nan().tolist() == [False, True, False, False]
    assert t.is_inf().tolist() == [False, False, True, True]
    assert t.is_finite().tolist() == [True, False, False, False]
    assert Tensor.from_ints([1], device=device).is_nan().tolist() == [False]


def test_division_by_zero_is_silent_inf(device):
    t = Tensor.from_floats([1.0, 0.0], device=device)
    with warnings.catch_warnings(record=True) as caught:
        out = t.div_scalar(0.0)
        log = t.log()
    assert out.tolist()[0] == float("inf")
    assert math.isnan(out.tolist()[1])
    assert log.tolist()[1] == -float("inf")
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]


def test_comparisons(device):
    a = Tensor.from_floats([1.0, 2.0, 3.0], device=device)
    b = Tensor.from_floats([3.0, 2.0, 1.0], device=device)
    assert a.equal(b).tolist() == [False, True, False]
    assert a.not_equal(b).tolist() == [True, False, True]
    assert a.greater(b).tolist() == [False, False, True]
    assert a.greater_equal(b).tolist() == [False, True, True]
    assert a.lower(b).tolist() == [True, False, False]
    assert a.lower_equal(b).tolist() == [True, True, False]
    assert a.greater_elem(1.5).tolist() == [False, True, True]
    assert a.lower_equal_elem(2).tolist() == [True, True, False]
    assert a.equal_elem(3.0).tolist() == [False, False, True]
    assert (a > b).tolist() == [False, False, True]
    assert (a == 2.0).tolist() == [False, True, False]
    assert (a.greater_elem(1.5).dtype) is DType.BOOL


def test_bool_logic_and_bitwise(device):
    p = Tensor.from_bools([True, True, False, False], device=device)
    q = Tensor.from_bools([True, False, True, False], device=device)
    assert p.bool_and(q).tolist() == [True, False, False, False]
    assert p.bool_or(q).tolist() == [True, True, True, False]
    assert p.bool_xor(q).tolist() == [False, True, True, False]
    assert p.bool_not().tolist() == [False, False, True, True]
    assert (p & q).tolist() == [True, False, False, False]
    assert (~p).tolist() == [False, False, True, True]
    i = Tensor.from_ints([12, 10], device=device)
    j = Tensor.from_ints([10, 6], device=device)
    assert i.bitwise_and(j).tolist() == [8, 2]
    assert i.bitwise_or(j).tolist() == [14, 14]
    assert i.bitwise_xor(j).tolist() == [6, 12]
    assert i.bitwise_not().tolist() == [-13, -11]
    assert (i << 1).tolist() == [24, 20]
    assert (i >> 2).tolist() == [3, 2]
    assert (i & 4).tolist() == [4, 0]


def test_all_close_and_equal_all(device):
    a = Tensor.from_floats([1.0, 2.0], device=device)
    assert a.all_close(a.add_scalar(1e-7))
    assert not a.all_close(a.add_scalar(1e-2))
    assert a.equal_all(Tensor.from_floats([1.0, 2.0], device=device))
    assert not a.equal_all(Tensor.from_floats([1.0, 2.0, 3.0], device=device))


@pytest.mark.parametrize(
    ("sa", "sb"),
    [
        ((3, 4), (4, 5)),
        ((2, 3, 4), (4, 5)),
        ((2, 3, 4), (2, 4, 5)),
        ((1, 3, 4), (5, 4, 2)),
        ((4,), (4, 3)),
        ((3, 4), (4,)),
        ((4,), (4,)),
    ],
    ids=str,
)
def test_matmul(device, rng, sa, sb):
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    out = Tensor.from_data(a, device=device).matmul(Tensor.from_data(b, device=device))
    assert_close(out, np.matmul(a.astype(np.float64), b.astype(np.float64)), rtol=1e-4, atol=1e-5)


def test_matmul_half_and_int(flex):
    a = np.arange(6, dtype=np.int64).reshape(2, 3)
    assert (
        Tensor.from_data(a, device=flex).matmul(Tensor.from_data(a.T.copy(), device=flex)).tolist()
        == (a @ a.T).tolist()
    )
    h = Tensor.from_floats([[1.0, 2.0]], device=flex).cast("bfloat16")
    assert h.matmul(h.transpose()).dtype is DType.BFLOAT16
    assert h.matmul(h.transpose()).tolist() == [[5.0]]
