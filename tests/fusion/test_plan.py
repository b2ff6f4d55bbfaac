"""The one Plan base (ember/backend/fusion/plan.py): variants, guards, the fallback
policy (a warning with the cause, on every target), donation defaults, and the
executor a backend's declared fusion target picks."""

from __future__ import annotations

import numpy as np
import pytest

from ember.backend.cuda.backend import CudaBackend
from ember.backend.cuda.catalog import RecordingRuntime
from ember.backend.flex import FlexBackend
from ember.backend.fusion import ReplayExecutor, executors
from ember.backend.fusion.cuda.executor import CudaExecutor, CudaPlan
from ember.backend.fusion.llvm import LLVMExecutor, LLVMPlan
from ember.backend.fusion.plan import Executor, Plan
from ember.backend.fusion.wgsl import CubePlan
from ember.backend.ops import UnaryOp
from ember.errors import FallbackWarning
from tests.fusion.oracle import Case


class _Guarded:
    """A variant that accepts the scalars it was lowered for (by their sign)."""

    offered: tuple = ()
    donated: tuple = ()

    def __init__(self, sign: bool) -> None:
        self.sign = sign
        self.compile_s = 0.0

    def run(self, backend, inputs, scalars):
        if (scalars[0] > 0) != self.sign:
            return None  # the guard failed: another variant
        return [inputs[0] * scalars[0]]


class _Target(Plan):
    target = "TEST"
    MAX_VARIANTS = 2

    def lower(self, backend, scalars, donated):
        if scalars[0] == 0:
            raise RuntimeError("zero is not lowered")
        return _Guarded(scalars[0] > 0)


class _Executor(Executor):
    plan_class = _Target


def _graph():
    case = Case()
    x = case.input(np.arange(3.0))
    return case.abstract([case.ops.unary(UnaryOp.ABS, x)])[0]


def test_variants_are_lowered_per_guard_answer_and_kept_up_to_the_limit():
    executor = _Executor()
    graph = _graph()
    plan = executor.plan(graph)
    assert executor.plan(graph) is plan and executor.cache_size() == 1
    x = np.arange(3.0)
    assert plan.run(None, [x], [2.0])[0].tolist() == [0.0, 2.0, 4.0]
    assert plan.run(None, [x], [3.0])[0].tolist() == [0.0, 3.0, 6.0]  # the same variant's guards hold
    assert len(plan.variants) == 1 and executor.stats["plans"] == 1
    plan.run(None, [x], [-1.0])  # the other answer: a second variant
    assert [v.sign for v in plan.variants] == [True, False] and executor.stats["plans"] == 2
    assert plan.donated(((0, 0),)) == () and plan.bind(((0, 0),), [x]) is None  # no donations by default


@pytest.mark.replays("the fallback itself is under test")
def test_a_failed_lowering_warns_with_its_cause_and_replays():
    plan = _Executor().plan(_graph())
    x = np.arange(3.0) - 1.0
    with pytest.warns(FallbackWarning, match=r"the TEST executor could not lower .*RuntimeError: zero is not lowered"):
        out = plan.run(FlexBackend(), [x], [0.0])
    np.testing.assert_array_equal(out[0], np.abs(x))  # the replay's result, not lost
    assert plan.replay is not None and not plan.variants


@pytest.mark.replays("the fallback itself is under test")
@pytest.mark.parametrize("plan_class", [LLVMPlan, CubePlan, CudaPlan])
def test_every_target_warns_when_its_lowering_fails(monkeypatch, plan_class):
    def broken(self, backend, scalars, donated):
        raise RuntimeError("a lowering bug")

    monkeypatch.setattr(plan_class, "lower", broken)
    plan = plan_class(_graph(), _Executor())
    x = np.arange(3.0) - 1.0
    with pytest.warns(FallbackWarning, match=f"the {plan_class.target} executor .*a lowering bug"):
        out = plan.run(FlexBackend(), [x], [])
    np.testing.assert_array_equal(out[0], np.abs(x))


@pytest.mark.replays("a failed lowering is part of the test")
def test_lowering_runs_with_the_cyclic_collector_paused(monkeypatch):
    import gc

    seen = []
    original = _Target.lower

    def lower(self, backend, scalars, donated):
        seen.append(gc.isenabled())
        return original(self, backend, scalars, donated)

    monkeypatch.setattr(_Target, "lower", lower)
    assert gc.isenabled()
    plan = _Executor().plan(_graph())
    x = np.arange(3.0)
    assert plan.run(None, [x], [2.0])[0].tolist() == [0.0, 2.0, 4.0]
    assert seen == [False] and gc.isenabled()  # paused for the lowering, on again after
    with pytest.warns(FallbackWarning):
        plan.run(FlexBackend(), [x], [0.0])  # a lowering that raises: the collector is on again
    assert seen == [False, False] and gc.isenabled()
    gc.disable()  # a caller that turned the collector off keeps it off
    try:
        _Executor().plan(_graph()).run(None, [x], [1.0])
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_backends_declare_their_fusion_target():
    assert FlexBackend.fusion_target == "llvm" and CudaBackend.fusion_target == "cuda"
    assert isinstance(executors.default_executor(FlexBackend()), LLVMExecutor)
    cuda = CudaBackend(0, RecordingRuntime())
    assert isinstance(executors.default_executor(cuda), CudaExecutor)

    class Undeclared(FlexBackend):
        fusion_target = None

    assert isinstance(executors.default_executor(Undeclared()), ReplayExecutor)
