"""Fusion schedules lowered to CUDA C: a traced training step (MLP, cross-entropy,
Adam) and a softmax are expanded and grouped by the fusion analysis with the cuda
target; every fused kernel (elementwise chains, reductions with prologues and
epilogues, static geometry, scalars read from an array) compiles with NVRTC."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import Device, Tensor
from ember.backend.fusion.cuda.target import CudaTarget, schedule_kernels
from ember.backend.fusion.primitive_graph import expand
from ember.backend.fusion.replay import Replay
from ember.backend.fusion.scheduler import Kernel, Matmul, schedule
from ember.nn import LinearConfig, Relu
from ember.nn.loss import CrossEntropyLoss
from ember.optim import AdamConfig, GradientsParams
from tests.cuda_backend.conftest import require_nvrtc
from tests.shared_models import Mlp

pytestmark = pytest.mark.nvrtc


class _Recorder:
    """An executor that keeps the graphs ember.compile asks it to plan."""

    def __init__(self):
        self.graphs = []
        self.scalars = []

    def plan(self, graph):
        self.graphs.append(graph)
        replay = Replay(graph)
        recorder = self

        class Plan:
            def run(self, backend, inputs, scalars=(), donated=()):
                recorder.scalars.append(list(scalars))
                return replay.run(backend, inputs, scalars)

        return Plan()


def _train_step_graph():
    device = Device.flex().autodiff()
    rng = np.random.default_rng(0)
    x = Tensor.from_data(rng.standard_normal((16, 12)).astype(np.float32), device=device)
    y = Tensor.from_data(rng.integers(0, 5, 16), device=device)
    model = Mlp(l1=LinearConfig(12, 8).init(device), act=Relu(), l2=LinearConfig(8, 5).init(device))
    optim = AdamConfig().init()
    ce = CrossEntropyLoss()
    recorder = _Recorder()

    @ember.compile(executor=recorder)
    def step(model, x, y):
        loss = ce.forward(model(x), y)
        return optim.step(1e-3, model, GradientsParams.from_grads(loss.backward(), model)), loss

    step(model, x, y)
    return recorder.graphs[0], recorder.scalars[0]


def test_training_step_schedule_lowers_and_compiles():
    graph, scalars = _train_step_graph()
    target = CudaTarget()
    expanded = expand(graph, scalars, target.expands)
    sched = schedule(expanded, target)
    kernels = [s for s in sched.steps if isinstance(s, Kernel)]
    assert any(s.reductions for s in kernels), "the loss's reductions are fused kernels"
    assert any(isinstance(s, Matmul) for s in sched.steps)
    codes = schedule_kernels(sched)
    assert len(codes) == len([k for k in kernels if all(n for n in k.space)])
    assert any("sc[" in c.source for c in codes.values()), "Adam's scalars are read from the scalar array"
    require_nvrtc()
    from ember.backend.cuda.nvrtc import compile_ptx_and_cubin, full_source, resources

    source = full_source("\n".join(c.source for c in codes.values()))
    for arch in ("sm_80", "sm_90"):
        _, cubin, log = compile_ptx_and_cubin(source, arch, extra=("-Xptxas=-v",))
        assert cubin[:4] == b"\x7fELF"
        report = resources(log)
        assert set(report) == {c.name for c in codes.values()}
        assert all(r.spill_stores == 0 and r.registers <= 96 for r in report.values())
