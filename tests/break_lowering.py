"""A pytest plugin that breaks one target's lowering, for scripts/check_lowering_breaks.sh.

``EMBER_TEST_BREAK_LOWERING=llvm|wgsl|cuda python -m pytest -p tests.break_lowering ...``
makes that target's lowering raise (an ember bug's stand-in), before any test module
imports it. The tests of that target must then fail: a plan whose lowering raises
replays op by op, which is the oracle those tests compare with, so only the checks of
tests/lowering.py and the suite's FallbackWarning filter can see it.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import pytest

ENV = "EMBER_TEST_BREAK_LOWERING"

#: Per target: the (module, attribute path) of each function that lowers a schedule.
LOWERINGS: dict[str, list[tuple[str, str]]] = {
    "llvm": [("ember.backend.fusion.llvm.executor", "LLVMPlan.lower")],
    "wgsl": [("ember.backend.fusion.wgsl.executor", "CubePlan.lower")],
    "cuda": [
        ("ember.backend.fusion.cuda.executor", "CudaPlan.lower"),
        ("ember.backend.fusion.cuda.target", "schedule_kernels"),  # tests that lower schedules directly
    ],
}


def _broken(target: str) -> Any:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{target} lowering broken on purpose ({ENV})")

    return broken


def pytest_configure(config: pytest.Config) -> None:
    target = os.environ.get(ENV, "")
    if target not in LOWERINGS:
        raise pytest.UsageError(f"{ENV}={target!r}: expected one of {sorted(LOWERINGS)}")
    for module_name, path in LOWERINGS[target]:
        owner: Any = importlib.import_module(module_name)
        *parents, name = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        getattr(owner, name)  # the hook must exist: a renamed lowering fails loudly here
        setattr(owner, name, _broken(target))
