"""How dtypes live on the GPU: float16 (native and in 32-bit words), bfloat16,
int64 in two 32-bit words, uint8, bool; float64 refused with the fix."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ember import Device, DType, Tensor
from ember.backend.cube.backend import CubeBackend
from ember.errors import DTypeError, ValueRangeError
from tests.conftest import assert_close


@pytest.fixture
def word_f16(gpu):
    """A second cube device whose float16 lives in 32-bit words (adapters without shader-f16)."""
    backend = CubeBackend(gpu.backend.adapter)
    backend.ensure_ready()
    backend.runtime.native_f16 = False
    return Device(backend, ("cube-test", "word-f16"), "Cube(test: float16 in words)")


def test_float64_is_refused_with_the_fix(gpu):
    for make in (
        lambda: Tensor.from_data(np.zeros(3), device=gpu),
        lambda: Tensor.zeros([2], device=gpu, dtype="float64"),
        lambda: Tensor.ones([2], device=gpu).cast("float64"),
        lambda: Tensor.random([2], device=gpu, dtype="float64"),
    ):
        with pytest.raises(DTypeError) as info:
            make()
        message = str(info.value)
        assert message.startswith("ember: cube: float64") and "float32" in message and "Device.flex()" in message


def test_int64_lives_in_two_words_over_its_whole_range(gpu, backend):
    storage = backend.storage(DType.INT64)
    assert storage.compute == "i64" and storage.itemsize == 8  # vec2<u32>: low word, high word
    edges = [-(2**63), 2**63 - 1, -(2**31) - 1, 2**31, 2**32 + 5, -1]
    t = Tensor.from_ints(edges, device=gpu)
    assert t.dtype is DType.INT64 and t.tolist() == edges
    assert (Tensor.from_ints([2**31 - 1], device=gpu) + 1).tolist() == [2**31]  # no 32-bit wrap
    assert (Tensor.from_ints([2**62], device=gpu) * 4).tolist() == [0]  # wraps at 64 bits, as numpy
    assert t.add_scalar(2**40).tolist() == [v + 2**40 if v < 2**63 - 2**40 else v + 2**40 - 2**64 for v in edges]
    with pytest.raises(ValueRangeError, match="does not fit"):
        t.add_scalar(2**63)
    assert Tensor.from_ints([7], device=gpu).cast("int32").cast("int64").dtype is DType.INT64
    assert Tensor.from_ints([2**33 + 7], device=gpu).cast("int32").tolist() == [7]  # as numpy's astype


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_int_arithmetic_matches_numpy(gpu, dtype):
    rng = np.random.default_rng(1)
    lo = 0 if dtype == "uint8" else -50
    a = rng.integers(lo, 100, size=(4, 5)).astype(dtype)
    b = rng.integers(1, 9, size=(5,)).astype(dtype)
    ta, tb = Tensor.from_data(a, device=gpu), Tensor.from_data(b, device=gpu)
    with np.errstate(all="ignore"):
        for ours, theirs in [
            (ta + tb, a + b),
            (ta - tb, a - b),
            (ta * tb, a * b),
            (ta // tb, a // b),
            (ta % tb, a % b),
            (ta.maximum(tb), np.maximum(a, b)),
            (ta.bitwise_xor(tb), a ^ b),
            (ta << 2, a << 2),
            (ta.powi_scalar(2), a**2),
            (ta.abs(), np.abs(a)) if dtype != "uint8" else (ta, a),
        ]:
            assert ours.dtype is DType.parse(dtype)
            assert ours.to_numpy().tolist() == theirs.tolist()
    for ours, theirs in [
        (ta.sum_dim(0), a.sum(0, keepdims=True, dtype=np.int64)),
        (ta.cumsum(1), np.cumsum(a, 1, dtype=np.int64)),
    ]:
        assert ours.dtype is DType.INT64  # sums widen to int64, as in PyTorch
        assert ours.to_numpy().tolist() == theirs.tolist()


def test_uint8_wraps_like_numpy(gpu):
    a = np.array([250, 3, 0], np.uint8)
    t = Tensor.from_data(a, device=gpu)
    assert (t + Tensor.from_data(np.array([10, 10, 10], np.uint8), device=gpu)).tolist() == [4, 13, 10]
    assert t.bitwise_not().tolist() == [5, 252, 255]
    assert Tensor.from_floats([-1.0, 300.5], device=gpu).cast("uint8").tolist() == [255, 44]


def test_bool_ops(gpu):
    p = Tensor.from_bools([True, False, True], device=gpu)
    assert p.cast("float32").tolist() == [1.0, 0.0, 1.0]
    assert p.int().sum().tolist() == [2]
    assert p.any().tolist() == [True] and p.all().tolist() == [False]
    assert Tensor.from_floats([0.0, -0.5, float("nan")], device=gpu).bool().tolist() == [False, True, True]


@pytest.mark.parametrize("words", [False, True], ids=["native", "words"])
def test_float16(gpu, word_f16, words):
    device = word_f16 if words else gpu
    rng = np.random.default_rng(2)
    x = rng.uniform(-3, 3, size=(5, 33)).astype(np.float16)
    t = Tensor.from_data(x, device=device)
    assert t.dtype is DType.FLOAT16 and t.to_numpy().tobytes() == x.tobytes()
    assert (t + t).to_numpy().tobytes() == (x + x).tobytes()
    x32 = x.astype(np.float32)
    assert_close(t.exp(), np.exp(x32), rtol=2e-3, atol=1e-3)
    assert_close(t.sum_dim(1), x32.sum(1, keepdims=True), rtol=2e-3, atol=2e-2)
    assert_close(t.matmul(t.transpose()), x32 @ x32.T, rtol=2e-3, atol=5e-2)
    assert t.cast("float32").to_numpy().tolist() == x32.tolist()
    assert Tensor.from_floats([70000.0], device=device).cast("float16").tolist() == [float("inf")]


def test_bfloat16_rounds_to_nearest_even(gpu):
    values = np.array([1.0, 1.00390625, 1.01171875, -2.5, 3.0e38, 1e-30], np.float32)
    t = Tensor.from_data(values, device=gpu).cast("bfloat16")
    expected = values.astype(ml_dtypes.bfloat16)
    assert t.dtype is DType.BFLOAT16 and t.to_numpy().tobytes() == expected.tobytes()
    u = Tensor.from_data(expected, device=gpu)
    with np.errstate(over="ignore"):
        squares = (expected.astype(np.float32) ** 2).astype(ml_dtypes.bfloat16)
    assert (u * u).to_numpy().tobytes() == squares.tobytes()
    nan = Tensor.from_floats([float("nan")], device=gpu).cast("bfloat16")
    assert np.isnan(nan.to_numpy().astype(np.float32)).all()


def test_empty_tensors(gpu):
    e = Tensor.zeros([0, 3], device=gpu)
    assert e.to_numpy().shape == (0, 3)
    assert e.sum_dim(0).tolist() == [[0.0, 0.0, 0.0]]
    assert e.exp().dims() == [0, 3] and Tensor.cat([e, Tensor.ones([1, 3], device=gpu)]).tolist() == [[1.0] * 3]
    assert Tensor.from_ints([], device=gpu).dims() == [0]
