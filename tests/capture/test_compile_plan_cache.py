"""Compiled plans kept on disk: a plan's LLVM IR names no address of its process (the
arena, pointer, scalar and status tables are read from a global the plan writes once
the module is loaded), so another executor, or another process, with the same graph
loads the machine code instead of optimising and compiling it, and computes the same
bits. The oracle is the eager step (the same losses within 1e-5) and the plan compiled
from scratch (bit for bit)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ember
from ember import Device, Distribution, Tensor
from ember.backend.fusion.llvm import LLVMExecutor
from ember.nn.loss import MseLoss, Reduction
from ember.optim import AdamWConfig, GradientsParams
from tests.shared_models import Mlp

REL = 1e-5  # compiled against eager: LLVM may reorder float operations
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("EMBER_COMPILE_CACHE", raising=False)
    return tmp_path / "llvm"


def _problem():
    device = Device.flex().autodiff()
    device.seed(3)
    x = Tensor.random([32, 4], Distribution.uniform(-1.0, 1.0), device=device)
    y = x.matmul(Tensor.from_floats([[1.0], [-2.0], [0.5], [3.0]], device=device)).add_scalar(0.5)
    model = Mlp.new(device, d_hidden=8)
    for p in model.params():
        p.val()
    return model, x, y


def _step():
    """A training step with its own optimizer (its moments are its state)."""
    optim = AdamWConfig(weight_decay=1e-2).init()

    def step(model, x, y, lr):
        loss = MseLoss().forward(model(x), y, Reduction.MEAN)
        return optim.step(lr, model, GradientsParams.from_grads(loss.backward(), model)), loss

    return step


def _variants(executor: LLVMExecutor) -> list:
    return [variant for plan in executor._plans.values() for variant in plan.variants]


def test_a_second_executor_loads_the_plans_and_computes_the_same_bits(cache_dir):
    model, x, y = _problem()
    eager, first = _step(), ember.compile(_step(), executor=LLVMExecutor())
    second_executor = LLVMExecutor()
    second = ember.compile(_step(), executor=second_executor)
    models = [model, model.fork(model.devices()[0]), model.fork(model.devices()[0])]
    losses: list[list[float]] = [[], [], []]
    # The three runs interleaved: each loaded module writes its own tables.
    for i in range(6):
        for k, fn in enumerate((eager, first, second)):
            models[k], loss = fn(models[k], x, y, 1e-2 * (1 + i % 2))
            losses[k].append(loss.into_scalar())
    np.testing.assert_allclose(losses[1], losses[0], rtol=REL)
    assert losses[2] == losses[1]  # bit for bit
    for a, b in zip(models[1].params(), models[2].params()):
        assert np.array_equal(a.val().to_data().to_numpy(), b.val().to_data().to_numpy())
    files = list(cache_dir.glob("*.o"))
    loaded = _variants(second_executor)
    assert files and loaded
    assert all(v.optimize_s == 0.0 for v in loaded)  # loaded, not optimised


def test_the_plan_cache_can_be_turned_off(cache_dir, monkeypatch):
    monkeypatch.setenv("EMBER_COMPILE_CACHE", "0")
    model, x, y = _problem()
    executor = LLVMExecutor()
    compiled, step = ember.compile(_step(), executor=executor), _step()
    reference = model.fork(model.devices()[0])
    for _ in range(3):
        model, loss = compiled(model, x, y, 1e-2)
        reference, want = step(reference, x, y, 1e-2)
        np.testing.assert_allclose(loss.into_scalar(), want.into_scalar(), rtol=REL)
    assert all(v.optimize_s > 0.0 for v in _variants(executor))
    assert not cache_dir.exists()


_CHILD = """
import json, sys
sys.path.insert(0, {root!r})
import ember
from ember.backend.fusion.llvm import LLVMExecutor
from tests.capture.test_compile_plan_cache import _problem, _step, _variants
model, x, y = _problem()
executor = LLVMExecutor()
compiled = ember.compile(_step(), executor=executor)
losses = []
for i in range(4):
    model, loss = compiled(model, x, y, 1e-2)
    losses.append(float(loss.into_scalar()).hex())
print(json.dumps({{"losses": losses, "optimized": [v.optimize_s > 0.0 for v in _variants(executor)]}}))
"""


@pytest.mark.slow
def test_another_process_loads_the_plans(cache_dir):
    """Across processes the addresses differ (ASLR); the IR, and so the key, do not."""
    env = {**os.environ, "EMBER_CACHE_DIR": str(cache_dir.parent), "PYTHONPATH": str(ROOT)}
    runs = []
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", _CHILD.format(root=str(ROOT))], env=env, capture_output=True, text=True, timeout=300
        )
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["optimized"] and all(first["optimized"])  # compiled
    assert second["optimized"] == [False] * len(first["optimized"])  # loaded
    assert second["losses"] == first["losses"]  # bit for bit
