"""Every wrong call raises an ember error that names the op and the fix."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Distribution, Tensor
from ember.errors import (
    DeviceError,
    DeviceMemoryError,
    DivisionByZeroError,
    DTypeError,
    EmberError,
    IndexOutOfBoundsError,
    ShapeError,
    ValueRangeError,
)


@pytest.fixture
def t(flex):
    return Tensor.from_floats([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], device=flex)


def test_hierarchy_extends_builtins():
    assert issubclass(ShapeError, ValueError) and issubclass(ShapeError, EmberError)
    assert issubclass(DTypeError, TypeError)
    assert issubclass(DeviceError, ValueError)
    assert issubclass(IndexOutOfBoundsError, IndexError)
    assert issubclass(ValueRangeError, ValueError)
    assert issubclass(DivisionByZeroError, ZeroDivisionError) and issubclass(DivisionByZeroError, ValueRangeError)
    assert issubclass(DeviceMemoryError, MemoryError)


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda t: t.add(Tensor.ones([4], device=t.device)), ShapeError, ["add", "[2, 3]", "[4]", "broadcast"]),
        (lambda t: t.matmul(t), ShapeError, ["matmul", "[2, 3]", "transpose"]),
        (lambda t: t.matmul(Tensor.ones([1], device=t.device).sum().reshape([])), ShapeError, ["matmul", "rank"]),
        (lambda t: t.reshape([4, 2]), ShapeError, ["reshape", "6 elements", "[4, 2]"]),
        (lambda t: t.sum_dim(2), IndexOutOfBoundsError, ["sum_dim", "dim 2", "rank-2"]),
        (lambda t: t.bool_and(t), DTypeError, ["bool_and", "float32", "cast"]),
        (lambda t: t.bitwise_and(t), DTypeError, ["bitwise_and", "int"]),
        (lambda t: t.add("x"), DTypeError, ["add", "str"]),
        (lambda t: t.add(np.ones(3)), DTypeError, ["add", "Tensor.from_data"]),
        (lambda t: t.int().add_scalar(2**70), ValueRangeError, ["add_scalar", "does not fit"]),
        (lambda t: t.cast("uint8").add_scalar(-1), ValueRangeError, ["uint8"]),
        (lambda t: t.clamp(2.0, 1.0), ValueRangeError, ["clamp", "min"]),
        (lambda t: t.clamp(), ValueRangeError, ["clamp"]),
        (lambda t: t.bool().neg(), DTypeError, ["neg", "bool"]),
        (lambda t: t.int().powi_scalar(-1), ValueRangeError, ["powi_scalar", "negative"]),
        (lambda t: t.powi_scalar(0.5), DTypeError, ["powi_scalar", "powf"]),
        (lambda t: t[3], IndexOutOfBoundsError, ["index 3", "size 2"]),
        (lambda t: t.narrow(1, 2, 5), IndexOutOfBoundsError, ["narrow"]),
        (lambda t: t.into_scalar(), ShapeError, ["into_scalar", "[2, 3]"]),
        (lambda t: t.expand([3, 3]), ShapeError, ["expand"]),
        (lambda t: t.permute([0]), ShapeError, ["permute"]),
        (lambda t: t.chunk(0), ValueRangeError, ["chunk"]),
        (lambda t: t.split(0), ValueRangeError, ["split"]),
        (lambda t: Tensor.arange(0, 5, 0, device=t.device), ValueRangeError, ["arange", "step"]),
        (lambda t: Tensor.arange("5", device=t.device), DTypeError, ["arange"]),
        (lambda t: Tensor.random([2], "normal", device=t.device), DTypeError, ["Distribution"]),
        (
            lambda t: Tensor.random([2], Distribution.uniform(0.0, 1e39), device=t.device),
            ValueRangeError,
            ["Tensor.random", "float32", "float64"],
        ),
        (
            lambda t: t.device.set_rng_state({"bit_generator": "PCG64"}),
            ValueRangeError,
            ["set_rng_state", "PCG64", "seed"],
        ),
        (
            lambda t: t.device.set_rng_state({"algorithm": "philox4x32-10", "seed": -1, "offset": 0}),
            ValueRangeError,
            ["set_rng_state", "'seed'", "2**64"],
        ),
        (lambda t: t.device.fork_rng("7").__enter__(), DeviceError, ["fork_rng", "int"]),
        (lambda t: Tensor.zeros([2], device="cpu"), DeviceError, ["Device"]),
        (lambda t: t.gather(1, Tensor.from_ints([[3]], device=t.device)), IndexOutOfBoundsError, ["gather", "index 3"]),
        (lambda t: t.select(0, Tensor.from_ints([[0]], device=t.device)), ShapeError, ["select", "rank 1"]),
        (lambda t: t.mask_fill(t, 0.0), DTypeError, ["mask_fill", "bool"]),
        (lambda t: t.int().one_hot(0), ValueRangeError, ["one_hot"]),
        (lambda t: t.argmax(5), IndexOutOfBoundsError, ["argmax"]),
        (lambda t: t.cast("complex"), DTypeError, ["dtype"]),
        (lambda t: t.backward(), Exception, ["autodiff"]),
        # values that would wrap (issue 13)
        (
            lambda t: Tensor.from_ints([2**40], dtype="int32", device=t.device),
            ValueRangeError,
            ["Tensor.from_data", "1099511627776", "int32", "wider dtype"],
        ),
        (lambda t: Tensor.from_data([1e20], dtype="int64", device=t.device), ValueRangeError, ["1e+20", "int64"]),
        (
            lambda t: Tensor.full([2], 300, dtype="uint8", device=t.device),
            ValueRangeError,
            ["Tensor.full", "300", "uint8"],
        ),
        (
            lambda t: Tensor.arange(2**31, 2**31 + 2, dtype="int32", device=t.device),
            ValueRangeError,
            ["arange", "int32"],
        ),
        (lambda t: t.int().floor_div(0), DivisionByZeroError, ["floor_div", "division by zero", "mask_fill"]),
        (lambda t: t.int() % t.int().mul_scalar(0), DivisionByZeroError, ["remainder", "int64", "division by zero"]),
        (lambda t: t.bool() - t.bool(), DTypeError, ["sub", "bool", "bool_xor"]),
        (lambda t: t.bool().sub_scalar(1), DTypeError, ["sub_scalar", "bool", "cast to int"]),
        (lambda t: t.bool() // t.bool(), DTypeError, ["floor_div", "two bool operands"]),
        (
            lambda t: Tensor.zeros([2**40], device=t.device),
            DeviceMemoryError,
            ["flex", "[1099511627776]", "4,398,046,511,104 bytes", "chunk"],
        ),
        (lambda t: Tensor.arange(2**45, device=t.device), DeviceMemoryError, ["flex", "int64", "bytes"]),
    ],
)
def test_error_messages(t, call, error, words):
    with pytest.raises(error) as info:
        call(t)
    message = str(info.value)
    assert message.startswith("ember:"), message
    for word in words:
        assert word in message, f"{word!r} missing from: {message}"


def test_mixed_devices_raise(t):
    other = Tensor.ones([2, 3], device=Device.flex().autodiff())
    for call in (t.add, t.mul, t.equal, t.matmul, t.maximum):
        with pytest.raises(DeviceError) as info:
            call(other if call is not t.matmul else other.transpose())
        message = str(info.value)
        assert "Flex(Cpu)" in message and "Autodiff" in message and "to_device" in message
    with pytest.raises(DeviceError):
        Tensor.cat([t, other])


def test_no_raw_numpy_errors_on_wrong_calls(t):
    """A sweep of wrong calls: each raises an EmberError, never a numpy error."""
    wrong = [
        lambda: t.add(Tensor.ones([3, 2], device=t.device)),
        lambda: t.slice_assign([(0, 1)], Tensor.ones([5], device=t.device)),
        lambda: t.scatter(0, Tensor.from_ints([[9, 9, 9]], device=t.device), Tensor.ones([1, 3], device=t.device)),
        lambda: t.select_assign(0, Tensor.from_ints([7], device=t.device), Tensor.ones([1, 3], device=t.device)),
        lambda: t.flip([3]),
        lambda: t.squeeze_dim(0),
        lambda: t.unsqueeze_dim(4),
        lambda: t.repeat_dim(0, -1),
        lambda: t.pad((1, 1, 1, 1, 1, 1)),
        lambda: Tensor.stack([t, t.transpose()]),
        lambda: t.topk(4, 1),
        lambda: t.swap_dims(0, 2),
    ]
    for call in wrong:
        with pytest.raises(EmberError):
            call()
