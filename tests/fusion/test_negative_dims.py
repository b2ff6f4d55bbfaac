"""A graph whose calls count a dim from the end (the protocol takes numpy's negative
dims; a composite or a hand-built graph may pass one): the graph records it
non-negative (``ember.backend.fusion.avals.normalize_dim``), so its shapes are right
and the LLVM lowering compiles it. Before, ``reduce`` with dim -1 inferred a
``[3, 1, 3, 5]`` result and the lowering fell back to replay."""

from __future__ import annotations

import numpy as np
import pytest

from ember.backend.fusion.llvm import LLVMExecutor
from ember.backend.ops import ArgReduceOp, CumulativeOp, ReduceOp
from tests.fusion.oracle import Case, assert_same


@pytest.fixture(scope="module")
def executor():
    return LLVMExecutor()


def _softmax(x: np.ndarray, dim: int) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(dim, keepdims=True))
    return e / e.sum(dim, keepdims=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("dim", [-1, -2, -3])
def test_reductions_and_softmaxes_along_a_negative_dim_lower(executor, dtype, dim, rng):
    values = rng.standard_normal((2, 3, 5)).astype(dtype)
    case = Case()
    x = case.input(values)
    outs = [
        case.ops.reduce(ReduceOp.SUM, x, dim),
        case.ops.reduce(ReduceOp.MAX, x, dim),
        case.ops.reduce(ReduceOp.MEAN, x, dim),
        case.ops.softmax(x, dim),
        case.ops.log_softmax(x, dim),
    ]
    assert [o.shape for o in outs[:3]] == [tuple(1 if d == dim % 3 else s for d, s in enumerate(values.shape))] * 3
    compiled, replayed, _ = case.run(executor, outs)  # run() asserts the plan lowered
    tol = 2e-6 if dtype == np.float32 else 1e-12
    for got, flex in zip(compiled, replayed):
        assert_same(got, flex, "negative dim", rtol=tol, atol=tol)
    x64 = values.astype(np.float64)
    expected = [
        x64.sum(dim, keepdims=True),
        x64.max(dim, keepdims=True),
        x64.mean(dim, keepdims=True),
        _softmax(values, dim),
        np.log(_softmax(values, dim)),
    ]
    for got, want in zip(compiled, expected):
        np.testing.assert_allclose(got, want, rtol=5 * tol, atol=5 * tol)


def test_other_calls_with_a_negative_dim_record_their_shapes(executor, rng):
    values = rng.standard_normal((3, 4)).astype(np.float32)
    case = Case()
    x, y = case.input(values), case.input(values[:, :2].copy())
    arg = case.ops.arg_reduce(ArgReduceOp.ARGMAX, x, -1)
    total = case.ops.cumulative(CumulativeOp.CUMSUM, x, -1)
    joined = case.ops.cat([x, y], -1)
    assert (arg.shape, total.shape, joined.shape) == ((3, 1), (3, 4), (3, 6))
    compiled, replayed, _ = case.run(executor, [arg, total, joined])
    np.testing.assert_array_equal(compiled[0], values.argmax(-1)[:, None])
    np.testing.assert_allclose(compiled[1], np.cumsum(values, -1), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(compiled[2], np.concatenate([values, values[:, :2]], -1))
