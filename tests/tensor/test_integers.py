"""Integer and bool rules against PyTorch, on every device: no value wraps when a tensor
is made, sums widen to int64, integer division by zero raises, bool arithmetic keeps
PyTorch's dtypes, and int64 holds its whole range (on cube too)."""

from __future__ import annotations

import numpy as np
import pytest

from ember import DType, Tensor
from ember.errors import DivisionByZeroError, DTypeError, ValueRangeError

I64_MAX, I64_MIN = 2**63 - 1, -(2**63)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda d: Tensor.from_ints([2**40], dtype="int32", device=d), ["1099511627776", "int32", "int64"]),
        (lambda d: Tensor.from_data([1e20], dtype="int64", device=d), ["1e+20", "int64"]),
        (lambda d: Tensor.from_ints([2**70], device=d), ["1180591620717411303424", "int64"]),
        (lambda d: Tensor.from_ints([[1, 2**63]], device=d), ["9223372036854775808", "int64"]),
        (lambda d: Tensor.from_data(np.array([256, 3]), dtype="uint8", device=d), ["256", "uint8", "[0, 255]"]),
        (lambda d: Tensor.from_ints([-1], dtype="uint8", device=d), ["-1", "uint8"]),
        (lambda d: Tensor.from_data(np.array([3.0e9], np.float32), dtype="int32", device=d), ["3000000000.0", "int32"]),
        (lambda d: Tensor.full([2], 300, dtype="uint8", device=d), ["300", "uint8"]),
        (lambda d: Tensor.full([2], 2**63, device=d), ["9223372036854775808", "int64"]),
        (lambda d: Tensor.full([2], -(2**31) - 1, dtype="int32", device=d), ["-2147483649", "int32"]),
        (lambda d: Tensor.arange(2**31 - 1, 2**31 + 1, dtype="int32", device=d), ["2147483648", "int32"]),
    ],
)
def test_making_a_tensor_never_wraps(device, make, words):
    with pytest.raises(ValueRangeError) as info:
        make(device)
    message = str(info.value)
    assert message.startswith("ember:") and "does not fit" in message and "wider dtype" in message
    for word in words:
        assert word in message, f"{word!r} missing from: {message}"


def test_values_at_the_edges_of_each_range_are_exact(device):
    assert Tensor.from_ints([I64_MIN, I64_MAX, -1, 0], device=device).tolist() == [I64_MIN, I64_MAX, -1, 0]
    assert Tensor.from_data([255.9, -0.5], dtype="uint8", device=device).tolist() == [255, 0]  # truncation
    assert Tensor.from_data([-(2.0**63)], dtype="int64", device=device).tolist() == [I64_MIN]
    assert Tensor.full([2], 255, dtype="uint8", device=device).tolist() == [255, 255]
    assert Tensor.full([1], I64_MIN, device=device).tolist() == [I64_MIN]
    assert Tensor.arange(2**31 - 2, 2**31 + 1, device=device).tolist() == [2**31 - 2, 2**31 - 1, 2**31]


SUM_VALUES = {
    "uint8": [200, 200, 7],
    "int32": [2**31 - 1, 2**31 - 1, 5],
    "int64": [2**40, -3, 2**62],
    "bool": [True, True, False],
}
PROD_VALUES = {"uint8": [200, 200, 3], "int32": [2**20, 2**20, 3], "int64": [2**20, -(2**21), 2**20], "bool": [True, True, False]}


@pytest.mark.parametrize("dtype", sorted(SUM_VALUES))
def test_reduction_dtypes_and_values_follow_torch(device, torch, dtype):
    t_dtype = getattr(torch, dtype)
    cases = [
        (SUM_VALUES, lambda t: t.sum(), lambda t: t.sum().reshape(1)),
        (SUM_VALUES, lambda t: t.reshape([1, 3]).sum_dim(1), lambda t: t.reshape(1, 3).sum(1, keepdim=True)),
        (SUM_VALUES, lambda t: t.cumsum(0), lambda t: t.cumsum(0)),
        (PROD_VALUES, lambda t: t.prod(), lambda t: t.prod().reshape(1)),
        (PROD_VALUES, lambda t: t.cumprod(0), lambda t: t.cumprod(0)),
        (SUM_VALUES, lambda t: t.max(), lambda t: t.max().reshape(1)),
        (SUM_VALUES, lambda t: t.min(), lambda t: t.min().reshape(1)),
        (SUM_VALUES, lambda t: t.cummax(0), lambda t: t.cummax(0).values),
        (SUM_VALUES, lambda t: t.cummin(0), lambda t: t.cummin(0).values),
    ]
    for table, ours, theirs in cases:
        out = ours(Tensor.from_data(np.array(table[dtype]), dtype=dtype, device=device))
        ref = theirs(torch.tensor(table[dtype], dtype=t_dtype))
        assert str(out.dtype) == str(ref.dtype).removeprefix("torch.")
        assert out.tolist() == ref.tolist()
    mean = Tensor.from_data(np.array(SUM_VALUES[dtype]), dtype=dtype, device=device).mean()
    assert mean.dtype is DType.FLOAT32  # ember's documented rule (PyTorch refuses the mean of ints)
    np.testing.assert_allclose(mean.tolist(), [np.mean(np.array(SUM_VALUES[dtype], np.float64))], rtol=1e-6)


BOOL_OPS = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "maximum": (lambda a, b: a.maximum(b), lambda a, b: a.maximum(b)),
    "minimum": (lambda a, b: a.minimum(b), lambda a, b: a.minimum(b)),
    "div": (lambda a, b: a / b, lambda a, b: a / b),
    "add True": (lambda a, b: a + True, lambda a, b: a + True),
    "mul True": (lambda a, b: a * True, lambda a, b: a * True),
    "add 1": (lambda a, b: a + 1, lambda a, b: a + 1),
    "mul 2": (lambda a, b: a * 2, lambda a, b: a * 2),
    "pow 2": (lambda a, b: a**2, lambda a, b: a**2),
}


@pytest.mark.parametrize("name", sorted(BOOL_OPS))
def test_bool_arithmetic_follows_torch(device, torch, name):
    ours, theirs = BOOL_OPS[name]
    a, b = [True, True, False, False], [True, False, True, False]
    out = ours(Tensor.from_bools(a, device=device), Tensor.from_bools(b, device=device))
    ref = theirs(torch.tensor(a), torch.tensor(b))
    assert str(out.dtype) == str(ref.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(out.to_numpy(), ref.numpy())


@pytest.mark.parametrize(
    ("op", "words"),
    [
        (lambda a, i: a - a, "subtraction with a bool"), (lambda a, i: a - 1, "subtraction with a bool"),
        (lambda a, i: 1 - a, "subtraction with a bool"), (lambda a, i: i - a, "subtraction with a bool"),
        (lambda a, i: a - True, "subtraction with a bool"),
        (lambda a, i: a // a, "two bool operands"), (lambda a, i: a % a, "two bool operands"),
    ],
)
def test_bool_arithmetic_that_torch_refuses_raises(device, op, words):
    a = Tensor.from_bools([True, False], device=device)
    with pytest.raises(DTypeError, match=words):
        op(a, Tensor.from_ints([1, 1], device=device))


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8"])
def test_integer_division_by_zero_raises(device, dtype):
    x = Tensor.from_ints([5, 7], dtype=dtype, device=device)
    zero_in = Tensor.from_ints([1, 0], dtype=dtype, device=device)
    for call in (
        lambda: x // 0, lambda: x % 0, lambda: x.remainder_scalar(0), lambda: x // zero_in, lambda: x % zero_in,
        lambda: 3 // zero_in, lambda: 3 % zero_in, lambda: x.floor_div(zero_in.float().int()),
    ):
        with pytest.raises(DivisionByZeroError) as info:
            call()
        assert isinstance(info.value, ZeroDivisionError) and "division by zero" in str(info.value)
    assert (x // Tensor.from_ints([2, 3], dtype=dtype, device=device)).tolist() == [2, 2]
    assert (x.float() // 0).tolist() == [float("inf")] * 2  # floats divide to inf, as PyTorch
