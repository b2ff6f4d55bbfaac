"""benchmarks/gpu.py's machinery: the hand-written reference kernels compute what they
claim, and captured launches (this checkout's, and another checkout's through a child
process) replay to the same results."""

from __future__ import annotations

import os

import numpy as np

from benchmarks import gpu, gpu_cases

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(runtime, block, shape):
    n = int(np.prod(shape))
    return np.frombuffer(runtime.read(block, 4 * n), np.float32, count=n).reshape(shape)


def test_reference_matmuls_are_correct(backend):
    runtime = backend.runtime
    case = gpu_cases.matmul_case("ragged", 70, 33, 50, batch_a=(2,), batch_b=(1,), tb=True)
    a, b = gpu_cases.inputs(case)
    want = a.astype(np.float64) @ np.swapaxes(b, -1, -2)
    for name, replay in gpu.reference_matmuls(runtime, case).items():
        replay()
        out = replay.launches[0][1][2]
        np.testing.assert_allclose(_read(runtime, out, want.shape), want, rtol=1e-4, atol=1e-4, err_msg=name)


def test_reference_add_is_correct(backend):
    case = {"kind": "add", "name": "add", "n": 4096}
    (replay,) = gpu.reference_add(backend.runtime, case).values()
    replay()
    a, b = gpu_cases.inputs(case)
    np.testing.assert_array_equal(_read(backend.runtime, replay.launches[0][1][2], a.shape), a + b)


def test_captured_launches_replay(backend):
    case = gpu_cases.matmul_case("small", 40, 12, 24)
    replay, error = gpu.ember_replay(backend, case)
    assert error < 1e-5
    out = replay.launches[-1][1][-1]
    first = _read(backend.runtime, out, (40, 24)).copy()
    replay()
    np.testing.assert_array_equal(_read(backend.runtime, out, (40, 24)), first)


def test_baseline_checkout_is_captured_in_a_child_process(backend):
    """Another checkout's kernels (here: this one's) come back compiled and replayable."""
    cases = [gpu_cases.matmul_case("tiny", 8, 8, 8), {"kind": "sum_rows", "name": "rows", "shape": [16, 100]}]
    replays = gpu.baseline_replays(backend.runtime, ROOT, cases)
    assert set(replays) == {"tiny", "rows"}
    for replay, error in replays.values():
        assert error < 1e-5 and replay.launches
        replay()
    backend.runtime.sync()
