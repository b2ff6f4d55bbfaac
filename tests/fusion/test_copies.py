"""``cat`` and ``slice_assign`` as the LLVM executor's copies (``fusion/llvm/copies.py``)
against numpy's ``concatenate`` and slice assignment, bit for bit: every dim, empty
inputs, operands computed in the plan, negative steps, special values and dtypes
narrower and wider than float32."""

from __future__ import annotations

import numpy as np
import pytest

from ember.backend.fusion.llvm import LLVMExecutor
from ember.backend.fusion.scheduler import Call, Library
from ember.backend.ops import BinaryOp
from tests.fusion.oracle import DTYPES, Case, special_floats


@pytest.fixture(scope="module")
def executor():
    return LLVMExecutor()


def _ops(plan, kind) -> list[str]:
    return [s.node.op for s in plan.schedule.steps if isinstance(s, kind)]


def _values(dtype: np.dtype, shape: tuple[int, ...], rng) -> np.ndarray:
    if dtype.kind == "f":
        n = int(np.prod(shape))
        return rng.permutation(special_floats(dtype, rng, max(96, n)))[:n].reshape(shape)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    return rng.integers(0, 100, shape).astype(dtype)


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" else a


@pytest.mark.parametrize("dtype", [*DTYPES, np.dtype(np.float16)], ids=str)
@pytest.mark.parametrize(
    ("shapes", "dim"),
    [
        ([(3, 4), (2, 4), (5, 4)], 0),
        ([(3, 4, 2), (3, 1, 2), (3, 0, 2)], 1),
        ([(2, 3, 5), (2, 3, 1)], 2),
        ([(7,), (9,)], 0),
    ],
)
def test_cat_matches_numpy_bit_for_bit(executor, dtype, shapes, dim, rng):
    case = Case()
    arrays = [_values(dtype, s, rng) for s in shapes]
    out = case.ops.cat([case.input(a) for a in arrays], dim)
    (compiled,), (replayed,), plan = case.run(executor, [out])
    expected = np.concatenate(arrays, axis=dim)
    np.testing.assert_array_equal(_bits(compiled), _bits(expected))
    np.testing.assert_array_equal(_bits(replayed), _bits(expected))
    assert _ops(plan, Library) == ["cat"] and not _ops(plan, Call)


def test_cat_of_values_computed_in_the_plan(executor, rng):
    case = Case()
    a, b = rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    x, y = case.input(a), case.input(b)
    doubled = case.ops.binary(BinaryOp.MUL, x, 2.0)
    out = case.ops.binary(BinaryOp.ADD, case.ops.cat([doubled, y], 1), 1.0)
    (compiled,), _, plan = case.run(executor, [out])
    np.testing.assert_array_equal(compiled, np.concatenate([a * np.float32(2.0), b], axis=1) + np.float32(1.0))
    assert not _ops(plan, Call)


@pytest.mark.parametrize(
    "dtype", [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.bool_)], ids=str
)
@pytest.mark.parametrize(
    ("shape", "slices"),
    [
        ((4, 6), ((1, 3, 1),)),
        ((4, 6), ((0, 4, 2), (5, 0, -2))),
        ((3, 5, 2), ((2, -1, -1), (1, 5, 3))),
        ((32, 64, 8), ((0, 32, 1), (63, 64, 1))),
        ((5,), ((2, 2, 1),)),
    ],
)
def test_slice_assign_matches_numpy_bit_for_bit(executor, dtype, shape, slices, rng):
    case = Case()
    base = _values(dtype, shape, rng)
    index = tuple(slice(a, b if b >= 0 else None, s) for a, b, s in slices)
    value = _values(dtype, base[index].shape, rng)
    out = case.ops.slice_assign(case.input(base), slices, case.input(value))
    (compiled,), (replayed,), plan = case.run(executor, [out])
    expected = base.copy()
    expected[index] = value
    np.testing.assert_array_equal(_bits(compiled), _bits(expected))
    np.testing.assert_array_equal(_bits(replayed), _bits(expected))
    assert _ops(plan, Library) == ["slice_assign"] and not _ops(plan, Call)
