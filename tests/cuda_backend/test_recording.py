"""The seed's training step on a recording cuda device (no GPU): the backend and the
CUDA Graph executor run every op's host logic, and every kernel the step emits,
eager and compiled (expanded: Adam, linear and the loss as primitives), compiles."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import Device, Distribution, Tensor
from ember.backend.cuda.backend import CudaBackend
from ember.backend.cuda.catalog import RecordingRuntime, batches
from ember.nn import LinearConfig, Relu
from ember.nn.loss import MseLoss, Reduction
from ember.optim import AdamConfig, GradientsParams
from tests.cuda_backend.conftest import require_nvrtc
from tests.shared_models import Mlp

pytestmark = pytest.mark.nvrtc


def _device() -> tuple[Device, RecordingRuntime]:
    runtime = RecordingRuntime()
    device = Device(CudaBackend(0, runtime), ("cuda-recording", id(runtime)), "Cube(Cuda(Recording))")
    return device.autodiff(), runtime


def _model(device: Device) -> Mlp:
    return Mlp(l1=LinearConfig(4, 16).init(device), act=Relu(), l2=LinearConfig(16, 1).init(device))


def _data(device: Device) -> tuple[Tensor, Tensor]:
    device.seed(42)
    x = Tensor.random([64, 4], Distribution.uniform(-1.0, 1.0), device=device)
    y = x.matmul(Tensor.from_floats([[1.0], [-2.0], [0.5], [3.0]], device=device)).add_scalar(0.5)
    return x, y


def test_eager_and_compiled_steps_emit_kernels_that_compile():
    device, runtime = _device()
    x, y = _data(device)
    model, optim = _model(device), AdamConfig().init()
    for _ in range(2):
        loss = MseLoss().forward(model(x), y, Reduction.MEAN)
        loss.into_scalar()
        model = optim.step(1e-2, model, GradientsParams.from_grads(loss.backward(), model))
    eager_kernels = len(runtime.sources)
    before = runtime.stats["launches"]
    loss = MseLoss().forward(model(x), y, Reduction.MEAN)
    model = optim.step(1e-2, model, GradientsParams.from_grads(loss.backward(), model))
    eager_launches = runtime.stats["launches"] - before
    assert eager_kernels > 10 and eager_launches > 20

    @ember.compile
    def step(model: Mlp, x: Tensor, y: Tensor) -> tuple[Mlp, Tensor]:
        loss = MseLoss().forward(model(x), y, Reduction.MEAN)
        return optim.step(1e-2, model, GradientsParams.from_grads(loss.backward(), model)), loss

    for _ in range(3):
        model, loss = step(model, x, y)
    assert step.stats["traces"] == 1 and step.stats["replays"] == 2
    from ember.backend.fusion.executors import default_executor

    executor = default_executor(device.inner().backend)
    assert executor.stats["plans"] == 1
    # No GPU: the capture cannot start, so the plan replays its expanded graph op by op.
    assert executor.stats["replays"] == 3 and executor.stats["captures"] == 0
    assert len(runtime.sources) > eager_kernels  # the expanded Adam update's kernels

    require_nvrtc()
    from ember.backend.cuda.nvrtc import compile_ptx_and_cubin

    for unit in batches(sorted(runtime.sources.values()), 200):
        _, cubin, _ = compile_ptx_and_cubin(unit, "sm_90")
        assert cubin[:4] == b"\x7fELF"


def test_recorded_random_draws_match_philox_counters():
    device, runtime = _device()
    device.seed(3)
    Tensor.random([5, 3], Distribution.normal(0.0, 1.0), device=device)
    names = [name for name, _ in runtime.sources.values()]
    assert "philox_f32" in names
    assert np.dtype(np.float32) == Tensor.random([2], device=device).to_numpy().dtype


def test_fused_plans_run_their_schedule_and_compile():
    from ember.backend.fusion.cuda.executor import CudaExecutor

    device, runtime = _device()
    x, y = _data(device)
    model, optim = _model(device), AdamConfig().init()
    executor = CudaExecutor(fuse=True)

    @ember.compile(executor=executor)
    def step(model: Mlp, x: Tensor, y: Tensor) -> tuple[Mlp, Tensor]:
        loss = MseLoss().forward(model(x), y, Reduction.MEAN)
        return optim.step(1e-2, model, GradientsParams.from_grads(loss.backward(), model)), loss

    before = runtime.stats["launches"]
    for _ in range(3):
        model, loss = step(model, x, y)
        assert loss.shape == [1] or list(loss.shape) == [1]
    assert executor.stats["replays"] == 3
    per_step = (runtime.stats["launches"] - before) / 3
    plans = [k for k in runtime.sources if k[0] == "plan"]
    assert len(plans) == step.stats["traces"], (step.stats, executor.stats)  # one module per traced step
    assert per_step < 40  # fused: far fewer launches than the eager step's ops
    require_nvrtc()
    from ember.backend.cuda.nvrtc import compile_ptx_and_cubin

    for unit in batches(sorted(runtime.sources.values()), 200):
        _, cubin, _ = compile_ptx_and_cubin(unit, "sm_90")
        assert cubin[:4] == b"\x7fELF"
