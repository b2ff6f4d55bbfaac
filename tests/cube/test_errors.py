"""Clear errors from the GPU backend: buffer limits, out of memory, indices, ranks."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Tensor
from ember.backend.cube.errors import GpuMemoryError
from ember.errors import DivisionByZeroError, EmberError, IndexOutOfBoundsError, ShapeError, ValueRangeError


def test_a_buffer_over_the_adapter_limit(gpu, backend):
    limit = backend.runtime.max_binding
    n = limit // 4 + 1
    with pytest.raises(GpuMemoryError) as info:
        Tensor.zeros([n], device=gpu)
    message = str(info.value)
    assert message.startswith("ember: cube:") and f"{limit:,}" in message and "chunk" in message
    assert isinstance(info.value, MemoryError) and isinstance(info.value, EmberError)


def test_out_of_memory_is_reported(gpu, backend, monkeypatch):
    wgpu = backend.runtime.wgpu

    def no_memory(**kwargs):
        raise wgpu.GPUOutOfMemoryError("Out of Memory")

    backend.empty_cache()  # no pooled buffer to fall back on
    monkeypatch.setattr(backend.runtime.device, "create_buffer", no_memory)
    with pytest.raises(GpuMemoryError, match="out of GPU memory allocating 400 bytes"):
        Tensor.ones([100], device=gpu).exp()


def test_index_bounds_are_checked(gpu, backend):
    t = Tensor.zeros([2, 3], device=gpu)
    computed = Tensor.from_ints([[0, 1]], device=gpu).mul_scalar(3)  # values unknown to the host
    with pytest.raises(IndexOutOfBoundsError, match="index 3 is out of bounds for dim 1 of size 3"):
        t.gather(1, computed)
    with pytest.raises(IndexOutOfBoundsError, match="index -1"):
        t.select(0, Tensor.from_ints([0, -1], device=gpu))
    with pytest.raises(IndexOutOfBoundsError):
        t.scatter(0, Tensor.from_ints([[2, 0, 0]], device=gpu), Tensor.ones([1, 3], device=gpu))
    ok = Tensor.from_ints([[0, 1]], device=gpu).mul_scalar(2)
    before = backend.stats()["readbacks"]
    t.gather(1, ok)
    t.gather(1, ok)  # the bounds found by the first check are remembered on the tensor
    assert backend.stats()["readbacks"] == before + 1
    before = backend.stats()["readbacks"]
    t.gather(1, Tensor.arange(3, device=gpu).reshape([1, 3]))  # known bounds: no read-back
    t.select(1, t.argmax(1).reshape([2]))
    assert backend.stats()["readbacks"] == before


def test_too_many_strided_dims(gpu):
    x = Tensor.from_data(np.zeros((2,) * 9, np.float32), device=gpu)
    y = x.permute([8, 0, 7, 1, 6, 2, 5, 3, 4])
    with pytest.raises(ShapeError, match="at most 8"):
        y.add(Tensor.ones([2, 1, 2, 1, 2, 1, 2, 1, 2], device=gpu))
    assert x.add_scalar(1.0).sum().into_scalar() == 512.0  # dense operands coalesce to one dim


def test_int64_index_bounds_are_checked_over_64_bits(gpu, backend):
    t = Tensor.zeros([2, 3], device=gpu)
    far = Tensor.from_ints([[1, 0]], device=gpu).mul_scalar(2**33).add_scalar(1)  # low word 1: only 64 bits tell
    with pytest.raises(IndexOutOfBoundsError, match="index 8589934593 is out of bounds for dim 1 of size 3"):
        t.gather(1, far)
    negative = Tensor.from_ints([0, 1], device=gpu).sub_scalar(2**32)  # low words 0 and 1
    with pytest.raises(IndexOutOfBoundsError, match="index -4294967296"):
        t.select(1, negative)
    assert t.select(1, negative.add_scalar(2**32 + 1)).dims() == [2, 2]


def test_new_integer_rules_hold_on_cube(gpu):
    with pytest.raises(ValueRangeError, match="300 does not fit uint8"):
        Tensor.full([2], 300, dtype="uint8", device=gpu)
    with pytest.raises(DivisionByZeroError, match="floor_div"):
        Tensor.from_ints([4, 5], device=gpu).floor_div(Tensor.from_ints([2, 0], device=gpu))
    assert Tensor.from_ints([200, 200], dtype="uint8", device=gpu).sum().tolist() == [400]
