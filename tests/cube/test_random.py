"""The Philox generator: the kernel against a numpy Philox, determinism, state."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Distribution, DType, Tensor
from ember.errors import ValueRangeError
from tests.cube.philox import uniform


def test_kernel_matches_numpy_philox_bit_for_bit(gpu):
    gpu.seed(0x1234_5678_9ABC_DEF0)
    got = Tensor.random([1001], device=gpu).to_numpy()
    assert got.tobytes() == uniform(0x1234_5678_9ABC_DEF0, 0, 1001).tobytes()
    # The next draw continues after the 251 counters the first one used.
    nxt = Tensor.random([7], device=gpu).to_numpy()
    assert nxt.tobytes() == uniform(0x1234_5678_9ABC_DEF0, 251, 7).tobytes()


def test_counter_carries_into_its_high_word(gpu):
    gpu.seed(5)
    state = gpu.rng_state()
    state["offset"] = 2**32 - 3
    gpu.set_rng_state(state)
    got = Tensor.random([40], device=gpu).to_numpy()
    assert got.tobytes() == uniform(5, 2**32 - 3, 40).tobytes()


def test_same_seed_bit_identical_and_state_roundtrip(gpu):
    gpu.seed(42)
    a = Tensor.random([3, 65], Distribution.normal(0.0, 1.0), device=gpu).to_numpy()
    state = gpu.rng_state()
    b = Tensor.random([9], Distribution.bernoulli(0.3), device=gpu).to_numpy()
    gpu.seed(42)
    assert Tensor.random([3, 65], Distribution.normal(0.0, 1.0), device=gpu).to_numpy().tobytes() == a.tobytes()
    gpu.set_rng_state(state)
    assert Tensor.random([9], Distribution.bernoulli(0.3), device=gpu).to_numpy().tobytes() == b.tobytes()
    assert gpu.autodiff().rng_state() == gpu.rng_state()
    with pytest.raises(ValueRangeError, match="rng_state"):
        gpu.set_rng_state({"bit_generator": "PCG64"})


def test_distributions(gpu):
    gpu.seed(3)
    n = Tensor.random([20000], Distribution.normal(2.0, 0.5), device=gpu).to_numpy()
    assert abs(n.mean() - 2.0) < 0.02 and abs(n.std() - 0.5) < 0.02
    u = Tensor.random([20000], Distribution.uniform(-1.0, 3.0), device=gpu).to_numpy()
    assert u.min() >= -1.0 and u.max() < 3.0 and abs(u.mean() - 1.0) < 0.05
    b = Tensor.random([20000], Distribution.bernoulli(0.1), device=gpu).to_numpy()
    assert set(np.unique(b)) <= {0.0, 1.0} and abs(b.mean() - 0.1) < 0.01
    i = Tensor.random([100], Distribution.uniform(0.0, 10.0), device=gpu, dtype="int32")
    assert i.dtype is DType.INT32 and i.min().into_scalar() >= 0 and i.max().into_scalar() <= 9
    h = Tensor.random([100], device=gpu, dtype="float16")
    assert h.dtype is DType.FLOAT16 and 0.0 <= float(h.min().into_scalar()) <= float(h.max().into_scalar()) <= 1.0
