"""Helpers of the LLVM executor's tests: graphs built op by op, run compiled and replayed."""

from __future__ import annotations

import numpy as np

from ember.backend.flex import FlexBackend
from ember.backend.fusion.graph import Aval, Graph
from ember.backend.fusion.primitive_graph import GraphBuilder, Value
from ember.backend.fusion.replay import Replay

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
INTS = (np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.uint8))
BOOL = np.dtype(np.bool_)
DTYPES = FLOATS + INTS + (BOOL,)


class Case:
    """A graph under construction: ``inputs`` with values, ``ops`` to record calls."""

    def __init__(self) -> None:
        self.graph = Graph()
        self.ops = GraphBuilder(self.graph)
        self.values: list[np.ndarray] = []

    def input(self, array: np.ndarray) -> Value:
        ref = self.graph.add_input(Aval(tuple(array.shape), array.dtype))
        self.values.append(array)
        return Value(ref, self.graph.avals[ref])

    def abstract(self, outputs: list[Value]) -> tuple[Graph, list]:
        """The graph returning ``outputs``, with its floats as run-time scalars (as a
        fusion device hands graphs to executors), and the scalars' values."""
        self.graph.outputs = [o.ref for o in outputs]
        return self.graph.abstract_scalars()

    def run(
        self, executor, outputs: list[Value], lowered: bool = True
    ) -> tuple[list[np.ndarray], list[np.ndarray], object]:
        """(compiled results, replayed results, plan). The plan must have lowered the
        graph (``lowered``): a plan that fell back replays, which is the oracle itself."""
        graph, scalars = self.abstract(outputs)
        flex = FlexBackend()
        plan = executor.plan(graph)
        compiled = [np.array(a) for a in plan.run(flex, list(self.values), scalars)]
        if lowered:
            assert plan.replay is None and plan.variants, "the plan fell back to replay: its lowering failed"
        replayed = [np.array(a) for a in Replay(graph, check=True).run(flex, list(self.values), scalars)]
        return compiled, replayed, plan


def special_floats(dtype: np.dtype, rng: np.random.Generator, n: int = 96) -> np.ndarray:
    """Random values with NaN, infinities, signed zeros, subnormals, halves and extremes."""
    special = [
        np.nan,
        np.inf,
        -np.inf,
        0.0,
        -0.0,
        0.5,
        -0.5,
        1.5,
        2.5,
        -2.5,
        1.0,
        -1.0,
        3.0,
        -3.0,
        1e-40,
        -1e-40,
        1e30,
        -1e30,
        88.0,
        -88.0,
        100.0,
        -104.0,
        0.25,
        7.0,
        1e-3,
        -1e-6,
        2.0**31,
        -(2.0**31),
        2.0**63,
        1e20,
    ]
    values = np.concatenate([np.array(special), rng.standard_normal(n - len(special)) * 4])
    with np.errstate(all="ignore"):
        return values.astype(dtype)


def special_ints(dtype: np.dtype, rng: np.random.Generator, n: int = 96) -> np.ndarray:
    info = np.iinfo(dtype)
    special = [0, 1, -1, 2, -2, 7, -7, 3, -3, info.min, info.max, info.min + 1, 63, 64, 65, 8, 31, 32]
    special = [s for s in special if info.min <= s <= info.max]
    low, high = max(info.min, -50), min(info.max, 50)
    values = np.concatenate([np.array(special, dtype=np.int64), rng.integers(low, high + 1, n - len(special))])
    return values.astype(dtype)


def sample(dtype: np.dtype, rng: np.random.Generator, n: int = 96) -> np.ndarray:
    if dtype.kind == "f":
        return special_floats(dtype, rng, n)
    if dtype.kind == "b":
        return rng.random(n) < 0.5
    return special_ints(dtype, rng, n)


def assert_same(actual: np.ndarray, expected: np.ndarray, what: str, rtol: float = 0.0, atol: float = 0.0) -> None:
    """Equal shapes and dtypes; values equal (NaN where NaN, and the sign of zeros) or,
    with tolerances, close."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, (
        f"{what}: {actual.shape} {actual.dtype} != {expected.shape} {expected.dtype}"
    )
    if actual.dtype.kind != "f":
        np.testing.assert_array_equal(actual, expected, err_msg=what)
        return
    nan_a, nan_e = np.isnan(actual), np.isnan(expected)
    assert (nan_a == nan_e).all(), f"{what}: NaN at {np.flatnonzero(nan_a != nan_e)[:5]}"
    if rtol == 0 and atol == 0:
        ok = ~nan_e
        np.testing.assert_array_equal(actual[ok], expected[ok], err_msg=what)
        assert (np.signbit(actual[ok]) == np.signbit(expected[ok])).all(), f"{what}: signed zero differs"
    else:
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
