"""The Philox kernel: the same bits as flex's numpy Philox, determinism, state."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Distribution, DType, Tensor
from ember.backend import philox
from ember.errors import ValueRangeError
from tests.cube.philox import uniform

DISTRIBUTIONS = [
    Distribution.default(),
    Distribution.uniform(-3.0, 7.1),
    Distribution.uniform(1e-3, 1e-3 + 1e-6),
    Distribution.normal(0.0, 1.0),
    Distribution.normal(0.5, 2.0),
    Distribution.normal(-3.0, 1e-3),
    Distribution.bernoulli(0.3),
]


def test_kernel_matches_numpy_philox_bit_for_bit(gpu):
    gpu.seed(0x1234_5678_9ABC_DEF0)
    got = Tensor.random([1001], device=gpu).to_numpy()
    assert got.tobytes() == uniform(0x1234_5678_9ABC_DEF0, 0, 1001).tobytes()
    # The next draw continues after the 251 counters the first one used.
    nxt = Tensor.random([7], device=gpu).to_numpy()
    assert nxt.tobytes() == uniform(0x1234_5678_9ABC_DEF0, 251, 7).tobytes()


@pytest.mark.parametrize("dist", DISTRIBUTIONS, ids=repr)
@pytest.mark.parametrize("n", [1, 7, 1001, 300_007])
def test_cube_and_flex_draw_the_same_bits(gpu, dist, n):
    key = 0xDEAD_BEEF_0000_0000 + n
    want = philox.sample((n,), dist, DType.FLOAT32, key, 2**32 - 5)
    got = gpu.backend.to_numpy(gpu.backend.random((n,), dist, DType.FLOAT32, key, 2**32 - 5))
    assert got.tobytes() == want.tobytes(), f"{int((got != want).sum())} of {n} values differ"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32"])
def test_narrow_dtypes_match_flex(gpu, dtype):
    for dist in (Distribution.uniform(-4.0, 9.0), Distribution.normal(0.0, 3.0)):
        gpu.seed(9)
        got = Tensor.random([4099], dist, device=gpu, dtype=dtype).to_numpy()
        Device.flex().seed(9)
        want = Tensor.random([4099], dist, device=Device.flex(), dtype=dtype).to_numpy()
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_one_seed_one_stream_on_every_backend(gpu):
    flex = Device.flex()
    for device in (gpu, flex):
        device.seed(2024)
    draws = []
    for device in (gpu, flex.autodiff()):
        x = Tensor.random([64, 4], Distribution.uniform(-1.0, 1.0), device=device).to_numpy()
        y = Tensor.random([33], Distribution.normal(0.0, 1.0), device=device).to_numpy()
        draws.append((x.tobytes(), y.tobytes(), device.rng_state()))
    assert draws[0] == draws[1]


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
    # A state saved on flex resumes the same stream on cube.
    Device.flex().set_rng_state(state)
    assert Tensor.random([9], Distribution.bernoulli(0.3), device=Device.flex()).to_numpy().tobytes() == b.tobytes()
    with pytest.raises(ValueRangeError, match="PCG64"):
        gpu.set_rng_state({"bit_generator": "PCG64", "state": {"state": 1, "inc": 3}})


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


def test_the_kernel_keeps_products_out_of_fused_multiply_adds(gpu):
    # Every product that feeds an addition goes through keep(); a compiler that fused
    # them (llvmpipe does) would round differently from numpy.
    from ember.backend.cube.kernels.random import PHILOX_WGSL

    body = PHILOX_WGSL[PHILOX_WGSL.index("fn ln_unit") :]
    assert "keep(" in body and body.count("keep(") >= len(philox.LOG_COEFFS) + len(philox.SIN_COEFFS)
