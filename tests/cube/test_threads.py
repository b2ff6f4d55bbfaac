"""Threads on one cube device: no wgpu validation errors, and with fork_rng the same
results as a sequential run (issue 13, item 5)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ember import Device, Distribution, DType, Tensor
from ember.backend import philox
from ember.backend.cube.backend import CubeBackend
from ember.nn import LinearConfig
from ember.nn.loss import MseLoss, Reduction
from ember.optim import AdamConfig, GradientsParams


def _run_threads(target, count: int) -> list[BaseException]:
    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            target(i)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return errors


def _train(device: Device, seed: int, steps: int) -> list[float]:
    """A small regression trained from a forked stream: its own data, init and dropout-free steps."""
    with device.fork_rng(seed):
        x = Tensor.random([32, 4], Distribution.uniform(-1.0, 1.0), device=device)
        y = x.sum_dim(1).mul_scalar(0.5)
        model, optim = LinearConfig(4, 1).init(device), AdamConfig().init()
        losses = []
        for _ in range(steps):
            loss = MseLoss().forward(model(x), y, Reduction.MEAN)
            losses.append(loss.into_scalar())
            model = optim.step(1e-2, model, GradientsParams.from_grads(loss.backward(), model))
        return losses


@pytest.mark.parametrize("name", ["cube", "flex"])
def test_two_threads_train_concurrently_and_reproduce(gpu, name):
    device = (gpu if name == "cube" else Device.flex()).autodiff()
    sequential = {i: _train(device, i, 25) for i in range(3)}
    concurrent: dict[int, list[float]] = {}

    def work(i: int) -> None:
        concurrent[i] = _train(device, i, 25)

    assert _run_threads(work, 3) == []
    assert concurrent == sequential
    assert sequential[0][-1] < sequential[0][0]


def test_concurrent_draws_and_reads_on_the_shared_stream(gpu):
    gpu.seed(31)
    per_thread = 60
    draws: dict[int, list[np.ndarray]] = {}

    def work(i: int) -> None:
        got = []
        for _ in range(per_thread):
            t = Tensor.random([8], device=gpu)
            (t * 2.0 + 1.0).sum()  # other launches in between, from every thread
            got.append(t.to_numpy())
        draws[i] = got

    assert _run_threads(work, 4) == []
    got = np.sort(np.concatenate([v for d in draws.values() for v in d]))
    want = np.sort(philox.sample((4 * 8 * per_thread,), Distribution.default(), DType.FLOAT32, 31, 0))
    assert np.array_equal(got, want)


def test_first_use_from_many_threads_opens_one_runtime(gpu):
    backend = CubeBackend(gpu.backend.adapter)
    runtimes = []

    def work(i: int) -> None:
        runtimes.append(backend.ensure_ready())
        backend.to_numpy(backend.random((16,), Distribution.default(), DType.FLOAT32, i, 0))

    assert _run_threads(work, 4) == []
    assert len({id(r) for r in runtimes}) == 1
    assert backend.stats()["compiles"] == 1  # the random kernel, compiled once


def test_buffers_freed_on_other_threads_return_to_the_pool(gpu):
    backend = gpu.backend
    backend.sync()
    kept = [Tensor.full([1024], float(i), device=gpu) for i in range(8)]

    def work(i: int) -> None:
        kept[i] = None  # the last reference to a buffer dies on this thread

    assert _run_threads(work, 8) == []
    before = backend.stats()["pool_hits"]
    fresh = [Tensor.full([1024], 1.0, device=gpu) for _ in range(8)]
    assert backend.stats()["pool_hits"] - before >= 8
    assert all(float(t.sum().into_scalar()) == 1024.0 for t in fresh)
