"""The device generator: seeds, states, scoped forks and threads (on flex; the cube
versions are in tests/cube/test_threads.py)."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from ember import Device, Distribution, DType, Tensor
from ember.backend import philox
from ember.device.generator import DeviceGenerator, Generator, is_legacy_state, legacy_seed
from ember.errors import DeviceError, ValueRangeError


def _draw(device: Device, n: int = 6) -> bytes:
    return Tensor.random([n], Distribution.normal(0.0, 1.0), device=device).to_numpy().tobytes()


def test_state_is_json_and_names_the_algorithm():
    flex = Device.flex()
    flex.seed(2**64 + 5)  # seeds are taken modulo 2**64
    assert flex.rng_state() == {"algorithm": "philox4x32-10", "seed": 5, "offset": 0}
    Tensor.random([9], device=flex)  # 9 float32 values: 3 blocks
    Tensor.random([3], device=flex, dtype="float64")  # 3 float64 values: 2 blocks
    state = flex.rng_state()
    assert state["offset"] == 5
    assert json.loads(json.dumps(state)) == state


@pytest.mark.parametrize(
    "state, match",
    [
        ({"bit_generator": "PCG64", "state": {"state": 7, "inc": 9}}, "PCG64"),
        ({"algorithm": "mt19937", "seed": 1, "offset": 0}, "rng_state"),
        ({"algorithm": "philox4x32-10", "seed": -1, "offset": 0}, "'seed'"),
        ({"algorithm": "philox4x32-10", "seed": 1, "offset": 2**64}, "'offset'"),
        ({"algorithm": "philox4x32-10", "seed": 1}, "'offset'"),
        ({"algorithm": "philox4x32-10", "seed": 1.5, "offset": 0}, "'seed'"),
        ("not a state", "rng_state"),
    ],
)
def test_bad_states_are_clear_errors_and_change_nothing(state, match):
    flex = Device.flex()
    flex.seed(1)
    before = flex.rng_state()
    with pytest.raises(ValueRangeError, match=match):
        flex.set_rng_state(state)
    assert flex.rng_state() == before


def test_legacy_pcg64_states_are_recognised_and_give_a_stable_seed():
    old = np.random.Generator(np.random.PCG64(3)).bit_generator.state
    assert is_legacy_state(old) and not is_legacy_state(Device.flex().rng_state())
    assert legacy_seed(old) == legacy_seed(dict(old)) and 0 <= legacy_seed(old) < 2**64
    assert legacy_seed(old) != legacy_seed(np.random.Generator(np.random.PCG64(4)).bit_generator.state)


def test_fork_rng_is_a_scoped_stream_that_leaves_the_device_stream_alone():
    flex = Device.flex()
    flex.seed(10)
    expected_after = (_draw(flex), _draw(flex))
    flex.seed(10)
    first = _draw(flex)
    with flex.fork_rng(99):
        forked = _draw(flex.autodiff())  # the autodiff wrapper shares the generator
        assert flex.rng_state() == {"algorithm": "philox4x32-10", "seed": 99, "offset": 2}
    assert (first, _draw(flex)) == expected_after
    flex.seed(99)
    assert _draw(flex) == forked  # fork_rng(s) is the stream seed(s) starts


def test_fork_rng_nests_and_seed_inside_acts_on_the_fork():
    flex = Device.flex()
    flex.seed(1)
    with flex.fork_rng(2):
        with flex.fork_rng(3):
            inner = _draw(flex)
        flex.seed(4)  # reseeds the fork, not the device stream
        after_seed = _draw(flex)
    assert flex.rng_state() == {"algorithm": "philox4x32-10", "seed": 1, "offset": 0}
    flex.seed(3)
    assert _draw(flex) == inner
    flex.seed(4)
    assert _draw(flex) == after_seed


def test_fork_rng_without_a_seed_takes_a_key_from_the_current_stream():
    flex = Device.flex()
    runs = []
    for _ in range(2):
        flex.seed(5)
        with flex.fork_rng():
            a = _draw(flex)
        with flex.fork_rng():
            b = _draw(flex)
        runs.append((a, b, flex.rng_state()["offset"]))
    assert runs[0] == runs[1] and runs[0][0] != runs[0][1] and runs[0][2] == 2


def test_fork_rng_rejects_a_bad_seed_and_restores_on_error():
    flex = Device.flex()
    with pytest.raises(DeviceError, match="fork_rng"), flex.fork_rng(1.5):
        pass
    flex.seed(8)
    with pytest.raises(RuntimeError), flex.fork_rng(1):
        raise RuntimeError("boom")
    assert flex.rng_state()["seed"] == 8


def test_forks_are_per_thread():
    flex = Device.flex()
    flex.seed(0)
    seen = {}
    inside = threading.Event()
    release = threading.Event()

    def holder():
        with flex.fork_rng(1234):
            inside.set()
            release.wait(10)
            seen["holder"] = flex.rng_state()["seed"]

    thread = threading.Thread(target=holder)
    thread.start()
    inside.wait(10)
    seen["main"] = flex.rng_state()["seed"]  # the other thread's fork is invisible here
    release.set()
    thread.join()
    assert seen == {"holder": 1234, "main": 0}


def test_threads_with_fork_rng_reproduce_a_sequential_run():
    flex = Device.flex()

    def work(i: int, out: dict) -> None:
        with flex.fork_rng(100 + i):
            out[i] = [_draw(flex, 1 + j) for j in range(50)]

    sequential: dict = {}
    for i in range(4):
        work(i, sequential)
    concurrent: dict = {}
    threads = [threading.Thread(target=work, args=(i, concurrent)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert concurrent == sequential


def test_threads_sharing_the_stream_never_get_the_same_blocks():
    flex = Device.flex()
    flex.seed(77)
    per_thread, draws = 200, {}

    def work(i: int) -> None:
        draws[i] = [Tensor.random([4], device=flex).to_numpy() for _ in range(per_thread)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = np.sort(np.concatenate([v for d in draws.values() for v in d]))
    want = np.sort(philox.sample((4 * 4 * per_thread,), Distribution.default(), DType.FLOAT32, 77, 0))
    assert np.array_equal(got, want)  # every block used once: the sequential draw, reordered
    assert flex.rng_state()["offset"] == 4 * per_thread


def test_generator_reserve_and_next_key():
    gen = Generator(7, 2**64 - 1)
    assert gen.reserve(3) == (7, 2**64 - 1) and gen.counter == 2
    w = philox.block(7, 2)
    assert gen.next_key() == w[0] | w[1] << 32 and gen.counter == 3
    assert DeviceGenerator(5).current() is not DeviceGenerator(5).current()


def test_a_range_beyond_float32_is_a_clear_error_that_draws_nothing():
    flex = Device.flex()
    flex.seed(1)
    for dist in (Distribution.uniform(-3e38, 3e38), Distribution.normal(0.0, 1e38), Distribution.uniform(0.0, 1e39)):
        with pytest.raises(ValueRangeError, match="float32"):
            Tensor.random([3], dist, device=flex)
    assert flex.rng_state()["offset"] == 0
    assert np.isfinite(
        Tensor.random([3], Distribution.uniform(-3e38, 3e38), device=flex, dtype="float64").to_numpy()
    ).all()


def test_fusion_and_autodiff_devices_share_the_generator_of_the_device_they_wrap():
    flex = Device.flex()
    stacked = flex.fusion().autodiff()
    flex.seed(3)
    want = _draw(flex)
    stacked.seed(3)
    assert _draw(stacked) == want and flex.rng_state() == stacked.rng_state()
    with stacked.fork_rng(3):
        assert _draw(flex) == want  # the fork is the shared generator's, seen from every layer
