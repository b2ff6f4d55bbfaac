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
PROD_VALUES = {
    "uint8": [200, 200, 3],
    "int32": [2**20, 2**20, 3],
    "int64": [2**20, -(2**21), 2**20],
    "bool": [True, True, False],
}


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
        (lambda a, i: a - a, "subtraction with a bool"),
        (lambda a, i: a - 1, "subtraction with a bool"),
        (lambda a, i: 1 - a, "subtraction with a bool"),
        (lambda a, i: i - a, "subtraction with a bool"),
        (lambda a, i: a - True, "subtraction with a bool"),
        (lambda a, i: a // a, "two bool operands"),
        (lambda a, i: a % a, "two bool operands"),
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
        lambda: x // 0,
        lambda: x % 0,
        lambda: x.remainder_scalar(0),
        lambda: x // zero_in,
        lambda: x % zero_in,
        lambda: 3 // zero_in,
        lambda: 3 % zero_in,
        lambda: x.floor_div(zero_in.float().int()),
    ):
        with pytest.raises(DivisionByZeroError) as info:
            call()
        assert isinstance(info.value, ZeroDivisionError) and "division by zero" in str(info.value)
    assert (x // Tensor.from_ints([2, 3], dtype=dtype, device=device)).tolist() == [2, 2]
    assert (x.float() // 0).tolist() == [float("inf")] * 2  # floats divide to inf, as PyTorch


# ---------------------------------------------------------------------- the int64 range
# Values on both sides of the 32-bit boundary and at the ends of the int64 range.
WIDE = np.array(
    [
        0,
        1,
        -1,
        2**31 - 1,
        2**31,
        -(2**31),
        -(2**31) - 1,
        2**32,
        2**40 + 7,
        -(2**40) - 3,
        I64_MAX,
        I64_MIN,
        123456789012345,
        -98765432109876,
    ],
    np.int64,
)
NONZERO = np.where(WIDE == 0, 5, WIDE)
LONG = np.random.default_rng(13).integers(-(2**45), 2**45, size=20000)  # long enough for split and tiled kernels
DUPS = np.random.default_rng(14).integers(-(2**40), 2**40, size=12).repeat(250)  # 3000 values, bitonic argsort


INT64_CASES = {
    "(2**31-1)+1": (lambda t: Tensor.from_ints([2**31 - 1], device=t.device) + 1, lambda w: np.array([2**31])),
    "2**20*2**20": (lambda t: Tensor.from_ints([2**20], device=t.device) * 2**20, lambda w: np.array([2**40])),
    "add": (lambda t: t + t.flip([0]), lambda w: np.asarray(w + w[::-1])),
    "sub": (lambda t: t - 2**33, lambda w: np.asarray(w - 2**33)),
    "mul (wraps)": (lambda t: t * t, lambda w: np.asarray(w * w)),
    "floor_div": (lambda t: t // 7, lambda w: w // 7),
    "floor_div negative": (lambda t: t // -(2**33 + 1), lambda w: w // -(2**33 + 1)),
    "floor_div tensors": (
        lambda t: t // Tensor.from_data(NONZERO[::-1].copy(), device=t.device),
        lambda w: np.asarray(w // NONZERO[::-1]),
    ),
    "remainder": (lambda t: t % 7, lambda w: w % 7),
    "remainder negative": (lambda t: t % -(2**33 + 1), lambda w: w % -(2**33 + 1)),
    "remainder tensors": (
        lambda t: t % Tensor.from_data(NONZERO[::-1].copy(), device=t.device),
        lambda w: np.asarray(w % NONZERO[::-1]),
    ),
    "pow": (
        lambda t: Tensor.from_ints([3, -3, 2**20, -7], device=t.device).powi_scalar(3),
        lambda w: np.array([3, -3, 2**20, -7]) ** 3,
    ),
    "compare across 32 bits": (
        lambda t: (t > 2**31).int() + (t < t.flip([0])).int() * 2 + t.equal_elem(-1).int() * 4,
        lambda w: (w > 2**31) + (w < w[::-1]) * 2 + (w == -1) * 4,
    ),
    "abs, neg, sign": (
        lambda t: Tensor.cat([t.abs(), t.neg(), t.sign()]),
        lambda w: np.asarray(np.concatenate([np.abs(w), -w, np.sign(w)])),
    ),
    "max, min, clamp": (
        lambda t: Tensor.cat([t.maximum(t.flip([0])), t.clamp(-(2**40), 2**40), t.max(), t.min()]),
        lambda w: np.concatenate([np.maximum(w, w[::-1]), np.clip(w, -(2**40), 2**40), [w.max(), w.min()]]),
    ),
    "bitwise and shifts": (
        lambda t: Tensor.cat([t ^ 2**35, t << 33, t >> 33, t << 64, t >> 70]),
        lambda w: np.asarray(np.concatenate([w ^ 2**35, w << 33, w >> 33, w << 64, w >> 70])),
    ),
    "sum beyond 32 bits": (lambda t: Tensor.cat([t.sum(), t.prod()]), lambda w: np.asarray([w.sum(), w.prod()])),
    "sum of a long row (split)": (
        lambda t: Tensor.from_data(LONG, device=t.device).sum(),
        lambda w: np.array([LONG.sum()]),
    ),
    "sum over rows": (
        lambda t: Tensor.from_data(LONG.reshape(200, 100), device=t.device).sum_dim(1).reshape([-1]),
        lambda w: LONG.reshape(200, 100).sum(1),
    ),
    "cumsum, cummax": (
        lambda t: Tensor.cat([t.cumsum(0), t.cummin(0)]),
        lambda w: np.asarray(np.concatenate([np.cumsum(w), np.minimum.accumulate(w)])),
    ),
    "cumsum of a long row (tiled)": (
        lambda t: Tensor.from_data(LONG[:1000], device=t.device).cumsum(0),
        lambda w: np.cumsum(LONG[:1000]),
    ),
    "argmax, argmin": (lambda t: Tensor.cat([t.argmax(0), t.argmin(0)]), lambda w: np.array([w.argmax(), w.argmin()])),
    "argsort": (lambda t: t.argsort(0), lambda w: np.argsort(w, kind="stable")),
    "sort descending (bitonic)": (
        lambda t: Tensor.from_data(DUPS, device=t.device).sort(0, descending=True),
        lambda w: np.sort(DUPS)[::-1],
    ),
    "argsort (bitonic, stable)": (
        lambda t: Tensor.from_data(DUPS, device=t.device).argsort(0),
        lambda w: np.argsort(DUPS, kind="stable"),
    ),
    "casts": (
        lambda t: Tensor.cat([t.cast("int32").cast("int64"), t.cast("uint8").cast("int64"), t.bool().cast("int64")]),
        lambda w: np.concatenate([w.astype(np.int32), w.astype(np.uint8), w != 0]).astype(np.int64),
    ),
    "to float32": (lambda t: t.float(), lambda w: w.astype(np.float32)),
    "from float32": (
        lambda t: Tensor.from_floats(
            [1e10, -1e10, 3.5e18, -9.2e18, 2.5, -2.5, 2**31, -(2**31) - 256], device=t.device
        ).cast("int64"),
        lambda w: np.array([1e10, -1e10, 3.5e18, -9.2e18, 2.5, -2.5, 2**31, -(2**31) - 256], np.float32).astype(
            np.int64
        ),
    ),
    "from int32": (
        lambda t: Tensor.from_ints([2**31 - 1, -5], dtype="int32", device=t.device).cast("int64") * 4,
        lambda w: np.array([2**31 - 1, -5], np.int64) * 4,
    ),
    "full and arange": (
        lambda t: Tensor.cat(
            [
                Tensor.full([2], I64_MIN, device=t.device),
                Tensor.arange(2**40, 2**40 + 5 * 2**33, 2**33, device=t.device),
            ]
        ),
        lambda w: np.concatenate([[I64_MIN] * 2, np.arange(2**40, 2**40 + 5 * 2**33, 2**33)]),
    ),
    "mask_fill and where": (
        lambda t: t.mask_fill(t > 0, 2**50).mask_where(t.equal_elem(I64_MIN), t.flip([0])),
        lambda w: np.where(w == I64_MIN, w[::-1], np.where(w > 0, 2**50, w)),
    ),
    "gather with computed indices": (lambda t: t.gather(0, (t.abs() % 14).abs()), lambda w: w[np.abs(np.abs(w) % 14)]),
    "select": (lambda t: t.select(0, Tensor.from_ints([13, 0, 10, 10], device=t.device)), lambda w: w[[13, 0, 10, 10]]),
    "scatter": (
        lambda t: t.scatter(
            0, Tensor.from_ints([1, 1, 3], device=t.device), Tensor.from_ints([2**40, 2**41, -1], device=t.device)
        ),
        lambda w: np.asarray(w + np.array([0, 2**40 + 2**41, 0, -1] + [0] * 10)),
    ),
    "select_assign (sorted)": (
        lambda t: Tensor.zeros([4], device=t.device, dtype="int64").select_assign(
            0,
            Tensor.from_data(np.arange(100) % 4, device=t.device),
            Tensor.from_data(np.arange(100) * 2**33, device=t.device),
        ),
        lambda w: np.array([np.arange(100)[np.arange(100) % 4 == k].sum() * 2**33 for k in range(4)]),
    ),
    "matmul": (
        lambda t: (
            Tensor.from_data(np.arange(12).reshape(3, 4) * 2**33, device=t.device)
            .matmul(Tensor.from_data(np.arange(8).reshape(4, 2) - 3, device=t.device))
            .reshape([-1])
        ),
        lambda w: ((np.arange(12).reshape(3, 4) * 2**33) @ (np.arange(8).reshape(4, 2) - 3)).reshape(-1),
    ),
}


@pytest.mark.parametrize("name", list(INT64_CASES))
def test_int64_matches_numpy_over_its_whole_range(device, name):
    ours, theirs = INT64_CASES[name]
    out = ours(Tensor.from_data(WIDE, device=device))
    with np.errstate(all="ignore"):  # numpy warns where int64 wraps; so does every backend's result
        expected = theirs(WIDE)
    assert out.to_numpy().tolist() == np.asarray(expected).tolist()
    if out.dtype.is_int:
        assert out.dtype is DType.INT64
