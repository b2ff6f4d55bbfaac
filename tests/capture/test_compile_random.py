"""Random draws inside ``ember.compile``: each replay takes its Philox counters from
the device's generator where the eager function would, so compiled and eager runs
draw the same numbers and leave the same generator state."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ember
from ember import Device, Distribution, Tensor
from ember.capture import CompileWarning


def noisy(x: Tensor) -> Tensor:
    noise = Tensor.random(x.dims(), Distribution.normal(0.0, 1.0), device=x.device)
    mask = Tensor.random(x.dims(), Distribution.bernoulli(0.5), device=x.device)
    return x.add(noise).mul(mask)


def _calls(fn, device: Device, n: int) -> tuple[list[bytes], dict]:
    device.seed(4)
    x = Tensor.ones([3, 5], device=device)
    out = [fn(x).to_data().to_numpy().tobytes() for _ in range(n)]
    return out, device.rng_state()


@pytest.mark.parametrize("name", ["flex", "flex+autodiff"])
def test_compiled_draws_match_eager_call_by_call(name):
    device = Device.parse(name)
    compiled = ember.compile(noisy)
    got, state = _calls(compiled, device, 5)
    want, want_state = _calls(noisy, device, 5)
    assert got == want and state == want_state
    assert len(set(got)) == 5  # a new draw each call, not the trace's numbers again
    assert compiled.stats["traces"] == 1 and compiled.stats["eager"] == 0


def test_a_compiled_call_inside_fork_rng_draws_from_the_fork():
    device = Device.flex()
    compiled = ember.compile(noisy)
    x = Tensor.ones([2, 2], device=device)
    compiled(x)  # traced outside any fork
    device.seed(1)
    with device.fork_rng(77):
        got = compiled(x).to_data().to_numpy()
    assert device.rng_state()["offset"] == 0
    with device.fork_rng(77):
        want = noisy(x).to_data().to_numpy()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("call", ["seed", "fork_rng", "rng_state"])
def test_generator_calls_inside_a_compiled_function_fall_back_to_eager(call):
    device = Device.flex()

    def fn(x: Tensor) -> Tensor:
        if call == "seed":
            device.seed(9)
        elif call == "rng_state":
            device.rng_state()
        else:
            with device.fork_rng(9):
                return noisy(x)
        return noisy(x)

    compiled = ember.compile(fn)
    x = Tensor.ones([2, 2], device=device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        device.seed(3)
        got = [compiled(x).to_data().to_numpy().tobytes() for _ in range(2)]
    assert any(issubclass(w.category, CompileWarning) and call in str(w.message) for w in caught)
    device.seed(3)
    assert got == [fn(x).to_data().to_numpy().tobytes() for _ in range(2)]
    assert device._rng.guard is None  # the trace gave the generator back
