"""The LLVM executor's row kernels (``softmax``, ``log_softmax`` along the last dim
of float32 values, :mod:`ember.backend.fusion.llvm.rows`) against flex, a float64
numpy oracle and torch: values, special values, gradients through them, and the
cases left to the expansion."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.backend.fusion.llvm import LLVMExecutor
from ember.backend.fusion.scheduler import Call, Library
from tests.fusion.oracle import Case, assert_same

F32 = np.dtype(np.float32)


@pytest.fixture(scope="module")
def executor():
    return LLVMExecutor()


def _libraries(plan) -> list[str]:
    return [s.node.op for s in plan.schedule.steps if isinstance(s, Library)]


def _oracle(x: np.ndarray, log: bool) -> np.ndarray:
    x = x.astype(np.float64)
    shifted = x - x.max(axis=-1, keepdims=True)
    total = np.exp(shifted).sum(axis=-1, keepdims=True)
    return shifted - np.log(total) if log else np.exp(shifted) / total


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape", [(3, 7), (2, 3, 64), (5, 1), (4, 65), (1, 300)], ids=str)
def test_row_kernels_match_flex_and_a_float64_oracle(executor, op, shape, rng):
    case = Case()
    values = (rng.standard_normal(shape) * 4).astype(F32)
    x = case.input(values)
    out = getattr(case.ops, op)(x, len(shape) - 1)  # the tensor API passes dims non-negative
    compiled, replayed, plan = case.run(executor, [out])
    assert _libraries(plan) == [op] and not any(isinstance(s, Call) for s in plan.schedule.steps)
    assert_same(compiled[0], replayed[0], op, rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(compiled[0], _oracle(values, op == "log_softmax"), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_special_values_match_flex(executor, op):
    inf, nan = np.inf, np.nan
    rows = np.array(
        [
            [0.0, 1.0, 2.0, 3.0],
            [-inf, 0.0, -inf, 1.0],  # masked positions
            [-inf, -inf, -inf, -inf],  # a fully masked row: NaN, as numpy
            [nan, 0.0, 1.0, 2.0],
            [-nan, 0.0, 1.0, 2.0],  # a NaN with the sign bit set
            [inf, 0.0, 1.0, 2.0],
            [-1e4, -1e4, 0.5, -1e4],  # masked by a large negative score: exp flushes to 0
            [-100.0, -1.0, -2.0, -90.0],  # exponentials below float32's normal range
            [3e38, -3e38, 0.0, 1.0],
            [-0.0, 0.0, -0.0, 0.0],
        ],
        F32,
    )
    case = Case()
    out = getattr(case.ops, op)(case.input(rows), 1)
    compiled, replayed, plan = case.run(executor, [out])
    assert _libraries(plan) == [op]
    assert_same(compiled[0], replayed[0], op, rtol=2e-6, atol=1e-30)
    with np.errstate(all="ignore"):
        expected = _oracle(rows, op == "log_softmax").astype(F32)
    assert_same(compiled[0], expected, op, rtol=2e-6, atol=1e-30)


@pytest.mark.parametrize(("dtype", "dim"), [(np.dtype(np.float64), 1), (F32, 0)], ids=["float64", "not the last dim"])
def test_other_softmaxes_are_expanded(executor, dtype, dim, rng):
    case = Case()
    values = rng.standard_normal((4, 6)).astype(dtype)
    out = case.ops.softmax(case.input(values), dim)
    compiled, replayed, plan = case.run(executor, [out])
    assert "softmax" not in _libraries(plan)
    assert_same(compiled[0], replayed[0], "softmax", rtol=1e-6, atol=1e-7)


def _attention_loss(device: Device, scores: np.ndarray, weights: np.ndarray, mask: np.ndarray):
    s = Tensor.from_data(scores, device=device).require_grad()
    w = Tensor.from_data(weights, device=device)
    masked = s.mask_fill(Tensor.from_data(mask, device=device), float("-inf"))
    probs = masked.softmax(-1)
    logp = s.log_softmax(-1)
    loss = probs.mul(w).sum().add(logp.mul(w).mean())
    grads = loss.backward()
    return loss.into_scalar(), s.grad(grads).to_data().to_numpy()


def test_gradients_through_the_row_kernels_match_eager_and_torch(rng, torch):
    scores = (rng.standard_normal((2, 3, 8, 8)) * 3).astype(F32)
    weights = rng.standard_normal((2, 3, 8, 8)).astype(F32)
    mask = np.triu(np.ones((8, 8), bool), 1)[None, None].repeat(2, 0).repeat(3, 1)
    fused = _attention_loss(Device.flex().fusion().autodiff(), scores, weights, mask)
    eager = _attention_loss(Device.flex().autodiff(), scores, weights, mask)
    np.testing.assert_allclose(fused[0], eager[0], rtol=1e-6)
    np.testing.assert_allclose(fused[1], eager[1], rtol=1e-5, atol=1e-7)

    s = torch.tensor(scores, requires_grad=True)
    w = torch.tensor(weights)
    probs = s.masked_fill(torch.tensor(mask), float("-inf")).softmax(-1)
    loss = (probs * w).sum() + (s.log_softmax(-1) * w).mean()
    loss.backward()
    np.testing.assert_allclose(fused[0], loss.item(), rtol=1e-5)
    np.testing.assert_allclose(fused[1], s.grad.numpy(), rtol=1e-5, atol=1e-6)
