"""The LSTM sequence's library steps (``fusion/llvm/rnn.py``) hand the backward the gates
activated, where ``z`` stays inside the plan: values and gradients against flex's replay
of the same graph, the same bits as the backward that computes the gates again, and
``z`` as flex computes it (before the nonlinearities) wherever it leaves the plan."""

from __future__ import annotations

import numpy as np
import pytest

from ember.backend.fusion.llvm import LLVMExecutor, rnn
from ember.backend.fusion.scheduler import Library
from ember.backend.ops import ReduceOp
from tests.fusion.oracle import Case

S, B, H = 5, 10, 16


@pytest.fixture(scope="module")
def executor():
    return LLVMExecutor()


def _graph(rng, reverse: bool, z_out: bool, z_read: bool = False):
    case = Case()
    proj = case.input(rng.standard_normal((S, B, 4 * H)).astype(np.float32))
    w_hh = case.input((rng.standard_normal((H, 4 * H)) * 0.3).astype(np.float32))
    h0, c0 = (case.input(rng.standard_normal((B, H)).astype(np.float32)) for _ in range(2))
    gy = case.input(rng.standard_normal((S, B, H)).astype(np.float32))
    y, h_n, c_n, h_in, c_in, z = case.ops.lstm_sequence(proj, w_hh, h0, c0, None, reverse)
    grads = case.ops.lstm_sequence_backward(w_hh, None, reverse, h_in, c_in, c_n, z, gy, None, None)
    outs = [y, h_n, c_n, *grads]
    if z_out:
        outs.append(z)
    if z_read:
        outs.append(case.ops.reduce(ReduceOp.SUM, z, 2))
    return case, outs


def _forward(plan):
    graph = plan.schedule.graph
    return graph, next(s.node for s in plan.schedule.steps if isinstance(s, Library) and s.node.op == "lstm_sequence")


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_activated_gates_match_flex_and_the_recomputing_backward(executor, rng, reverse, monkeypatch):
    seed = int(rng.integers(1 << 30))
    case, outs = _graph(np.random.default_rng(seed), reverse, z_out=False)
    compiled, replayed, plan = case.run(executor, outs)
    graph, forward = _forward(plan)
    assert rnn._gates_activated(graph, forward)
    for got, ref in zip(compiled, replayed):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    monkeypatch.setattr(rnn, "_gates_activated", lambda graph, node: False)
    case, outs = _graph(np.random.default_rng(seed), reverse, z_out=False)
    recomputed, _, _ = case.run(LLVMExecutor(), outs)
    for got, ref in zip(compiled, recomputed):
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize(("z_out", "z_read"), [(True, False), (False, True)], ids=["returned", "read"])
def test_z_that_leaves_the_backward_keeps_the_pre_activations(executor, rng, z_out, z_read):
    case, outs = _graph(rng, False, z_out=z_out, z_read=z_read)
    compiled, replayed, plan = case.run(executor, outs)
    graph, forward = _forward(plan)
    assert not rnn._gates_activated(graph, forward)
    for got, ref in zip(compiled, replayed):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
