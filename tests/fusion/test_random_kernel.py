"""Random draws in compiled LLVM plans (a kernel of their own, one call of the shared
fill, ember/backend/kernel/llvm/philox_fill.py) against the host's Philox stream
(ember/backend/philox.py, flex's numpy draws), an independent numpy Philox
(tests/cube/philox.py) and Random123's known-answer vector: the same bits for any key,
counter (carries and wraps included) and shape (odd sizes too), read by the kernels of
the ops that use them."""

from __future__ import annotations

import numpy as np
import pytest

from ember.backend import philox
from ember.backend.distribution import Distribution
from ember.backend.dtype import DType
from ember.backend.flex import FlexBackend
from ember.backend.fusion.graph import Sc
from ember.backend.fusion.llvm import LLVMExecutor
from ember.backend.fusion.scheduler import Call, Kernel
from ember.backend.kernel.llvm.loops import filled_draw
from ember.backend.ops import BinaryOp, ReduceOp
from tests.cube.philox import known_answer, philox_words, uniform
from tests.fusion.oracle import Case

KEY = 0x0123_4567_89AB_CDEF
#: (key, first counter): zero, a key with both halves set, a counter whose low word
#: carries into the high one within the draw, and one that wraps modulo 2**64.
STREAMS = [(0, 0), (KEY, 12345), (2**64 - 1, 2**32 - 3), (KEY, 2**64 - 2)]
SHAPES = [(1,), (3,), (7, 5), (2, 3, 17), (1031,)]
DISTRIBUTIONS = [Distribution.bernoulli(0.3), Distribution.default(), Distribution.uniform(-3.0, 5.0)]
DTYPES = {np.dtype(np.float32): DType.FLOAT32, np.dtype(np.float64): DType.FLOAT64}


@pytest.fixture(scope="module")
def executor():
    return LLVMExecutor()


def _draw(case: Case, shape: tuple[int, ...], distribution: Distribution, dtype: np.dtype, key, counter):
    return case.ops.random(shape, distribution, DTYPES[dtype], key, counter)


def _run(executor, case: Case, outputs: list, scalars: list[int]) -> tuple[list[np.ndarray], object]:
    case.graph.outputs = [o.ref for o in outputs]
    plan = executor.plan(case.graph)
    got = [np.array(a) for a in plan.run(FlexBackend(), list(case.values), list(scalars))]
    assert plan.replay is None, "the plan fell back to replay"
    assert not any(isinstance(s, Call) for s in plan.schedule.steps), "a draw ran on the host"
    return got, plan


@pytest.mark.parametrize("dtype", list(DTYPES), ids=str)
@pytest.mark.parametrize("distribution", DISTRIBUTIONS, ids=repr)
def test_a_compiled_draw_is_the_host_stream_bit_for_bit(executor, dtype, distribution):
    # One plan, the key and counter run-time scalars: every stream through one compile.
    for shape in SHAPES:
        case = Case()
        out = _draw(case, shape, distribution, dtype, Sc(0), Sc(1))
        for key, counter in STREAMS:
            (got,), _ = _run(executor, case, [out], [key, counter])
            want = philox.sample(shape, distribution, DTYPES[dtype], key, counter)
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), (shape, key, counter)


def test_constant_key_and_counter_compile_too(executor):
    case = Case()
    out = _draw(case, (9, 11), Distribution.bernoulli(0.5), np.dtype(np.float32), KEY, 2**32 - 1)
    (got,), _ = _run(executor, case, [out], [])
    want = philox.sample((9, 11), Distribution.bernoulli(0.5), DType.FLOAT32, KEY, 2**32 - 1)
    assert got.tobytes() == want.tobytes()


def test_the_known_answer_and_an_independent_philox(executor):
    case = Case()
    out = _draw(case, (4,), Distribution.default(), np.dtype(np.float32), Sc(0), Sc(1))
    (got,), _ = _run(executor, case, [out], [0, 0])
    words = np.array(known_answer(), np.uint32)
    assert got.tolist() == ((words >> 8).astype(np.float64) * 2.0**-24).tolist()
    # An odd size past a carry of the counter's low word, against the independent Philox.
    case = Case()
    n = 4 * 1000 + 3
    out = _draw(case, (n,), Distribution.default(), np.dtype(np.float32), Sc(0), Sc(1))
    (got,), _ = _run(executor, case, [out], [KEY, 2**32 - 500])
    assert got.tobytes() == uniform(KEY, 2**32 - 500, n).tobytes()
    # float64: two words per value, ((w0 >> 5) * 2**26 + (w1 >> 6)) * 2**-53.
    case = Case()
    out = _draw(case, (5,), Distribution.default(), np.dtype(np.float64), Sc(0), Sc(1))
    (got,), _ = _run(executor, case, [out], [KEY, 77])
    w = philox_words(KEY, 77, 3).reshape(-1, 2)[:5].astype(np.float64)
    assert got.tolist() == ((np.floor(w[:, 0] / 32) * 2.0**26 + np.floor(w[:, 1] / 64)) * 2.0**-53).tolist()


def _fills(plan) -> list[Kernel]:
    """The plan's kernels that store a draw (each one call of the fill)."""
    return [s for s in plan.schedule.steps if isinstance(s, Kernel) and filled_draw(s) is not None]


def _loads(kernel: Kernel, buffer: int) -> bool:
    exprs = [st.expr for st in kernel.stores] + [r.expr for r in kernel.reductions]
    return any(e.kind == "load" and e.op == buffer for x in exprs for e in x.walk())


def test_a_dropout_mask_is_filled_once_and_read_by_the_kernels_that_use_it(executor, rng):
    # mask * x / (1 - p), a sum over each dim and a transposed read of the mask: the
    # draw is one fill, which the kernels of its readers load.
    x = rng.standard_normal((6, 13)).astype(np.float32)
    case = Case()
    xv = case.input(x)
    keep = _draw(case, (6, 13), Distribution.bernoulli(0.75), np.dtype(np.float32), Sc(0), Sc(1))
    scale = case.input(np.full((), 1 / 0.75, np.float32))
    y = case.ops.binary(BinaryOp.MUL, xv, case.ops.binary(BinaryOp.MUL, keep, scale))
    rows = case.ops.reduce(ReduceOp.SUM, y, 1)
    cols = case.ops.reduce(ReduceOp.SUM, keep, 0)
    flipped = case.ops.permute(keep, (1, 0))
    (got_y, got_rows, got_cols, got_t), plan = _run(executor, case, [y, rows, cols, flipped], [KEY, 99])
    mask = philox.sample((6, 13), Distribution.bernoulli(0.75), DType.FLOAT32, KEY, 99)
    want = x * (mask * np.float32(1 / 0.75))
    assert got_y.tobytes() == want.tobytes()
    np.testing.assert_allclose(got_rows, want.astype(np.float64).sum(1, keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(got_cols, mask.sum(0, keepdims=True))
    np.testing.assert_array_equal(got_t, mask.T)
    (fill,) = _fills(plan)
    drawn = fill.stores[0].buffer
    kernels = [s for s in plan.schedule.steps if isinstance(s, Kernel) and s is not fill]
    assert any(_loads(k, drawn) and _loads(k, 0) for k in kernels), "x and the mask are read by one kernel"
    assert not any(e.kind == "random" for k in kernels for st in k.stores for e in st.expr.walk())


@pytest.mark.parametrize(("shape", "dim"), [((6, 13), 1), ((6, 13), 0), ((3, 5, 7), 1)])
def test_a_draw_in_the_epilogue_of_a_reduction(executor, rng, shape, dim):
    # sum(x, dim) * u: the draw (of the reduced shape) is filled first and read in the
    # reduction's epilogue, numbered by the reduced space's elements.
    x = rng.standard_normal(shape).astype(np.float32)
    case = Case()
    total = case.ops.reduce(ReduceOp.SUM, case.input(x), dim)
    reduced = tuple(1 if d == dim else n for d, n in enumerate(shape))
    u = _draw(case, reduced, Distribution.uniform(-1.0, 2.0), np.dtype(np.float32), Sc(0), Sc(1))
    (got,), plan = _run(executor, case, [case.ops.binary(BinaryOp.MUL, total, u)], [12345, 2**32 - 7])
    mask = philox.sample(reduced, Distribution.uniform(-1.0, 2.0), DType.FLOAT32, 12345, 2**32 - 7)
    np.testing.assert_allclose(got, x.astype(np.float64).sum(dim, keepdims=True) * mask, rtol=1e-6, atol=1e-6)
    fill, kernel = plan.schedule.steps
    assert isinstance(fill, Kernel) and filled_draw(fill) is not None
    assert isinstance(kernel, Kernel) and kernel.reductions
    loaded = [e for st in kernel.stores if st.reduced for e in st.expr.walk() if e.kind == "load"]
    assert any(e.op == fill.stores[0].buffer for e in loaded)


def test_normal_draws_and_other_dtypes_stay_calls(executor):
    for distribution, dtype in (
        (Distribution.normal(0.0, 1.0), DType.FLOAT32),
        (Distribution.bernoulli(0.5), DType.FLOAT16),
    ):
        case = Case()
        draw = case.ops.random((8,), distribution, dtype, Sc(0), Sc(1))
        case.graph.outputs = [draw.ref]
        plan = executor.plan(case.graph)
        (got,) = plan.run(FlexBackend(), [], [KEY, 3])
        assert any(isinstance(s, Call) for s in plan.schedule.steps)
        assert np.array(got).tobytes() == philox.sample((8,), distribution, dtype, KEY, 3).tobytes()
