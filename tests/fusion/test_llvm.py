"""The LLVM executor against flex: every lowered op, views, reductions, matmuls,
run-time scalars, memory, fallbacks, training, and a missing llvmlite."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

from ember import Device, Tensor
from ember.backend.dtype import DType
from ember.backend.flex import FlexBackend
from ember.backend.fusion import executors
from ember.backend.fusion.backend import FusionBackend
from ember.backend.fusion.llvm import LLVMExecutor
from ember.backend.fusion.scheduler import Call, Kernel, Library, Matmul
from ember.backend.kernel.llvm.ops import LOWERED_BINARY, LOWERED_UNARY
from ember.backend.kernel.views import View
from ember.backend.ops import BinaryOp, CumulativeOp, ReduceOp, UnaryOp
from ember.errors import FallbackWarning
from tests.fusion.oracle import DTYPES, FLOATS, Case, assert_same, sample
from tests.shared_models import Mlp

# Ops whose results match flex bit for bit; the others (libm or polynomial
# transcendentals) within a few ulps.
_EXACT_UNARY = {
    UnaryOp.NEG,
    UnaryOp.ABS,
    UnaryOp.SQRT,
    UnaryOp.RSQRT,
    UnaryOp.RECIP,
    UnaryOp.SIGN,
    UnaryOp.ROUND,
    UnaryOp.FLOOR,
    UnaryOp.CEIL,
    UnaryOp.TRUNC,
    UnaryOp.SQUARE,
    UnaryOp.IS_NAN,
    UnaryOp.IS_INF,
    UnaryOp.IS_FINITE,
    UnaryOp.LOGICAL_NOT,
    UnaryOp.BITWISE_NOT,
}
_INEXACT_BINARY = {BinaryOp.POW, BinaryOp.ATAN2}
_ULPS = {np.dtype(np.float32): 3e-7, np.dtype(np.float64): 1e-15}


@pytest.fixture(scope="module")
def executor():
    return LLVMExecutor()


def _tol(dtype: np.dtype, exact: bool) -> dict:
    return {} if exact or dtype.kind != "f" else {"rtol": _ULPS[dtype], "atol": 1e-300}


# ---------------------------------------------------------------------- elementwise
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_unary_op_matches_flex(executor, dtype, rng):
    case = Case()
    x = case.input(sample(dtype, rng))
    ops = sorted(LOWERED_UNARY[dtype.kind])
    compiled, replayed, _ = case.run(executor, [case.ops.unary(op, x) for op in ops])
    for op, a, e in zip(ops, compiled, replayed):
        assert_same(a, e, f"{op} {dtype}", **_tol(dtype, op in _EXACT_UNARY))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_binary_op_matches_flex_on_all_pairs_of_special_values(executor, dtype, rng):
    left, right = sample(dtype, rng, 40), sample(dtype, rng, 40)
    case = Case()
    a, b = case.input(np.repeat(left, 40)), case.input(np.tile(right, 40))
    scalar = {"f": -2.5, "i": -3, "u": 3, "b": True}[dtype.kind]
    ops = sorted(LOWERED_BINARY[dtype.kind])
    outs = [case.ops.binary(op, a, b) for op in ops] + [case.ops.binary(op, a, scalar) for op in ops]
    compiled, replayed, _ = case.run(executor, outs)
    for op, x, e in zip(ops + ops, compiled, replayed):
        assert_same(x, e, f"{op} {dtype}", **_tol(dtype, op not in _INEXACT_BINARY))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_broadcasting_operands(executor, dtype, rng):
    def values(shape):
        return sample(dtype, rng, int(np.prod(shape)) + 40)[: int(np.prod(shape))].reshape(shape)

    case = Case()
    col, row, cube = case.input(values((3, 1))), case.input(values((1, 4))), case.input(values((2, 3, 4)))
    vec, one = case.input(values((4,))), case.input(values((1,)))
    cond = case.input(rng.random((3, 1)) < 0.5)
    op = BinaryOp.ADD if dtype.kind != "b" else BinaryOp.LOGICAL_XOR
    outs = [
        case.ops.binary(op, col, row),  # [3,1] x [1,4] -> [3,4]
        case.ops.binary(op, cube, vec),  # [2,3,4] x [4]
        case.ops.binary(op, cube, col),  # [2,3,4] x [3,1]
        case.ops.binary(BinaryOp.MAXIMUM, vec, one),
        case.ops.where(cond, cube, row),  # three shapes
        case.ops.binary(BinaryOp.GE, case.ops.expand(row, (3, 4)), col),
    ]
    compiled, replayed, _ = case.run(executor, outs)
    for n, (a, e) in enumerate(zip(compiled, replayed)):
        assert_same(a, e, f"broadcast {n} {dtype}")


@pytest.mark.parametrize("src", DTYPES, ids=str)
def test_casts_between_all_dtypes(executor, src, rng):
    case = Case()
    x = case.input(sample(src, rng))
    targets = [DType.from_numpy(d) for d in DTYPES]
    compiled, replayed, plan = case.run(executor, [case.ops.cast(x, t) for t in targets])
    for t, a, e in zip(targets, compiled, replayed):
        assert_same(a, e, f"cast {src} -> {t}")
    if src.kind == "f":  # numpy wraps float -> uint8 through a wider int: left to flex
        assert any(isinstance(s, Call) for s in plan.schedule.steps)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_where_clamp_full_and_chains(executor, dtype, rng):
    case = Case()
    x, y = case.input(sample(dtype, rng)), case.input(sample(dtype, rng)[::-1].copy())
    cond = case.input(rng.random(96) < 0.5)
    low, high = {"f": (-1.5, 2.0), "i": (-3, 5), "u": (2, 9), "b": (False, True)}[dtype.kind]
    kind = DType.from_numpy(dtype)
    outs = [
        case.ops.where(cond, x, y),
        case.ops.where(cond, x, high),
        case.ops.where(cond, low, y),
        case.ops.clamp(x, low, high),
        case.ops.clamp(x, low, None),
        case.ops.clamp(x, None, high),
        case.ops.full((3, 4), high, kind),
        # A chain: every value but the last stays in registers.
        case.ops.where(case.ops.binary(BinaryOp.GT, x, y), case.ops.binary(BinaryOp.MAXIMUM, x, y), y),
    ]
    compiled, replayed, _ = case.run(executor, outs)
    for i, (a, e) in enumerate(zip(compiled, replayed)):
        assert_same(a, e, f"output {i} {dtype}")


def test_scalars_empty_tensors_and_integer_relu(executor, rng):
    case = Case()
    s = case.input(np.array(2.5, np.float32))  # rank 0
    e = case.input(np.zeros((0, 3), np.float32))  # empty
    i = case.input(np.array([-3, 0, 4, -(2**31)], np.int32))
    outs = [
        case.ops.unary(UnaryOp.EXP, case.ops.binary(BinaryOp.MUL, s, s)),
        case.ops.binary(BinaryOp.ADD, e, 1.0),
        case.ops.reduce(ReduceOp.SUM, e, 0),
        case.ops.reduce(ReduceOp.MAX, e, 1),
        case.ops.relu(i),
        case.ops.relu(case.input(np.array([True, False]))),
    ]
    compiled, replayed, _ = case.run(executor, outs)
    for n, (a, b) in enumerate(zip(compiled, replayed)):
        assert_same(a, b, f"output {n}", **_tol(a.dtype, False))


def test_elementwise_chain_is_one_kernel_and_dead_values_are_not_stored(executor, rng):
    case = Case()
    x = case.input(rng.standard_normal((8, 32)).astype(np.float32))
    b = case.input(rng.standard_normal(32).astype(np.float32))
    h = case.ops.binary(BinaryOp.ADD, x, b)  # broadcast operand
    h = case.ops.unary(UnaryOp.TANH, h)
    h = case.ops.reshape(h, (256,))  # free inside a kernel
    h = case.ops.binary(BinaryOp.MUL, h, 0.5)
    out = case.ops.unary(UnaryOp.EXP, h)
    compiled, replayed, plan = case.run(executor, [out])
    assert_same(compiled[0], replayed[0], "chain", rtol=1e-6, atol=1e-7)
    kernels = [s for s in plan.schedule.steps if isinstance(s, Kernel)]
    assert len(kernels) == 1 and len(kernels[0].stores) == 1


def test_very_long_chains_are_cut_into_kernels(executor):
    from ember.backend.fusion.scheduler import MAX_DEPTH

    case = Case()
    x = case.input(np.array([1.0, 2.0], np.float64))
    y = x
    for _ in range(3 * MAX_DEPTH):
        y = case.ops.binary(BinaryOp.ADD, y, 1.0)
    c = case.ops.full((2,), 0.0, DType.FLOAT64)
    for _ in range(2 * MAX_DEPTH):  # a chain of constants only
        c = case.ops.binary(BinaryOp.ADD, c, 0.5)
    compiled, replayed, plan = case.run(executor, [y, c])
    for a, e in zip(compiled, replayed):
        assert_same(a, e, "chain")
    assert 5 <= len(plan.schedule.steps) <= 8  # about one kernel per MAX_DEPTH ops


def test_exact_gelu_and_sigmoid_paths_are_accurate(executor, rng):
    x_np = (rng.standard_normal((4, 1000)) * 3).astype(np.float32)
    case = Case()
    x = case.input(x_np)
    erf = case.ops.unary(UnaryOp.ERF, case.ops.binary(BinaryOp.MUL, x, 0.7071067811865476))
    gelu = case.ops.binary(BinaryOp.MUL, case.ops.binary(BinaryOp.MUL, x, case.ops.binary(BinaryOp.ADD, erf, 1.0)), 0.5)
    compiled, replayed, _ = case.run(executor, [gelu, case.ops.sigmoid(x)])
    import math

    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x_np.astype(np.float64).ravel()])
    np.testing.assert_allclose(compiled[0].ravel(), exact, atol=1e-6, rtol=1e-6)
    np.testing.assert_allclose(compiled[0], replayed[0], atol=5e-7, rtol=1e-6)
    np.testing.assert_allclose(compiled[1], 1 / (1 + np.exp(-x_np.astype(np.float64))), atol=1e-7, rtol=1e-6)


# ---------------------------------------------------------------------- views
def test_layout_ops_are_views_with_no_copy(executor, rng):
    x_np = rng.standard_normal((4, 6, 5)).astype(np.float64)
    case = Case()
    x = case.input(x_np)
    views = [
        case.ops.permute(x, (2, 0, 1)),
        case.ops.slice(x, ((3, -1, -2), (1, 6, 2))),
        case.ops.flip(x, (1, 2)),
        case.ops.expand(case.ops.slice(x, ((0, 1, 1),)), (3, 6, 5)),
        case.ops.reshape(x, (24, 5)),
    ]
    outs = [case.ops.binary(BinaryOp.MUL, v, 2.0) for v in views]
    outs.append(case.ops.reshape(case.ops.permute(x, (1, 0, 2)), (6, 20)))  # needs a copy
    compiled, replayed, plan = case.run(executor, outs)
    for i, (a, e) in enumerate(zip(compiled, replayed)):
        assert_same(a, e, f"view {i}")
    steps = plan.schedule.steps
    assert all(isinstance(s, Kernel) for s in steps) and len(steps) == len(outs)


@pytest.mark.parametrize("seed", range(30))
def test_reshape_of_strided_views_agrees_with_numpy(seed):
    rng = np.random.default_rng(seed)
    shape = tuple(int(s) for s in rng.integers(1, 4, rng.integers(1, 5)))
    base = np.arange(int(np.prod(shape)) * 2 ** len(shape)).reshape(tuple(s * 2 for s in shape))
    arr = base[tuple(slice(None, None, 2) for _ in shape)]
    if rng.random() < 0.5:
        arr = arr.transpose(rng.permutation(len(shape)))
    if rng.random() < 0.3:
        arr = arr[tuple(slice(None) if n == 1 else slice(None, 1) for n in arr.shape[:1])]
    item = arr.itemsize
    view = View(arr.shape, tuple(s // item for s in arr.strides), 0)
    total = arr.size
    candidates = [(total,), tuple(reversed(arr.shape)), arr.shape + (1,), (1,) + arr.shape]
    if len(arr.shape) >= 2:
        candidates.append((arr.shape[0] * arr.shape[1],) + arr.shape[2:])
        candidates.append(arr.shape[:-2] + (arr.shape[-2] * arr.shape[-1],))
    for new in candidates:
        got = view.reshape(new)
        try:
            expected = arr.reshape(new, copy=False)
        except ValueError:
            assert got is None, (arr.shape, arr.strides, new)
            continue
        assert got is not None, (arr.shape, arr.strides, new)
        rebuilt = np.lib.stride_tricks.as_strided(
            base.reshape(-1)[got.offset :], new, tuple(s * item for s in got.strides)
        )
        np.testing.assert_array_equal(rebuilt, expected)


# ---------------------------------------------------------------------- reductions
@pytest.mark.parametrize("rank", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reductions_over_every_dim(executor, rank, dtype, rng):
    shape = (5, 3, 4, 6)[:rank]
    n = int(np.prod(shape))
    values = (
        sample(dtype, rng, max(n, 40))[:n].reshape(shape)
        if dtype.kind != "f"
        else rng.standard_normal(shape).astype(dtype)
    )
    if dtype.kind == "f":
        values.flat[3] = np.nan if rank > 1 else values.flat[3]
    case = Case()
    x = case.input(values)
    ops = [op for op in ReduceOp if dtype.kind == "f" or op != ReduceOp.MEAN]
    outs, labels = [], []
    for dim in range(rank):
        for op in ops:
            outs.append(case.ops.reduce(op, x, dim))
            labels.append(f"{op} dim {dim}")
    compiled, replayed, _ = case.run(executor, outs)
    for label, a, e in zip(labels, compiled, replayed):
        tol = {"rtol": 1e-5, "atol": 1e-5} if dtype.kind == "f" else {}
        assert_same(a, e, f"{label} {dtype}", **tol)


def test_reduction_prologues_and_epilogues_fuse(executor, rng):
    x_np = rng.standard_normal((16, 50)).astype(np.float32)
    case = Case()
    x = case.input(x_np)
    sq = case.ops.reduce(ReduceOp.SUM, case.ops.binary(BinaryOp.MUL, x, x), 1)  # sum(x * x)
    rms = case.ops.unary(UnaryOp.SQRT, case.ops.binary(BinaryOp.DIV, sq, 50.0))  # epilogue
    soft = case.ops.softmax(x, 1)
    logsoft = case.ops.log_softmax(x, 0)
    compiled, replayed, plan = case.run(executor, [rms, soft, logsoft])
    for i, (a, e) in enumerate(zip(compiled, replayed)):
        np.testing.assert_allclose(a, e, rtol=2e-6, atol=1e-6, err_msg=str(i))
    kernels = [s for s in plan.schedule.steps if isinstance(s, Kernel)]
    # rms: one kernel; softmax along the last dim: a row kernel (fusion/llvm/rows.py);
    # log_softmax along dim 0: max, sum with its log in the epilogue, subtract.
    assert len(kernels) == 4
    assert [s.node.op for s in plan.schedule.steps if isinstance(s, Library)] == ["softmax"]
    assert any(
        k.reductions and any(s.reduced for s in k.stores) and any(not s.reduced for s in k.stores) for k in kernels
    )


def test_mean_of_an_empty_dim_runs_on_flex(executor):
    case = Case()
    x = case.input(np.zeros((3, 0), np.float32))
    compiled, replayed, _ = case.run(
        executor, [case.ops.reduce(ReduceOp.MEAN, x, 1), case.ops.reduce(ReduceOp.SUM, x, 1)]
    )
    for a, e in zip(compiled, replayed):
        assert_same(a, e, "empty")


# ---------------------------------------------------------------------- matmul
_MATMULS = [
    ((1, 1), (1, 1)),
    ((3, 1), (1, 4)),
    ((1, 7), (7, 1)),
    ((5, 7), (7, 3)),
    ((64, 4), (4, 16)),
    ((64, 16), (16, 1)),
    ((128, 96), (96, 64)),
    ((2, 3, 4, 5), (5, 6)),
    ((1, 3, 4, 5), (2, 1, 5, 6)),
    ((2, 40, 50), (2, 50, 30)),
    ((3, 0), (0, 4)),
    ((1, 40), (40, 30)),  # one row or one column: gemv
    ((30, 40), (40, 1)),
    ((2, 1, 40), (40, 30)),
    ((3, 40, 8), (3, 8, 1)),
]


_ENGINES = {"blas": 1, "loops": 1 << 62}  # BLAS thresholds: always BLAS, always generated loops


@pytest.fixture(scope="module", params=list(_ENGINES))
def matmul_executor(request):
    return LLVMExecutor(blas_threshold=_ENGINES[request.param])


@pytest.mark.parametrize("shapes", _MATMULS, ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("transpose", [False, True])
def test_matmul_shapes_and_layouts(matmul_executor, shapes, dtype, transpose, rng):
    (sa, sb) = shapes
    executor = matmul_executor
    case = Case()
    if transpose:  # operands arrive transposed (strided views): BLAS flags or generated loops
        a = case.ops.permute(
            case.input(rng.standard_normal(sa[:-2] + sa[-2:][::-1]).astype(dtype)),
            tuple(range(len(sa) - 2)) + (len(sa) - 1, len(sa) - 2),
        )
        b = case.ops.permute(
            case.input(rng.standard_normal(sb[:-2] + sb[-2:][::-1]).astype(dtype)),
            tuple(range(len(sb) - 2)) + (len(sb) - 1, len(sb) - 2),
        )
    else:
        a = case.input(rng.standard_normal(sa).astype(dtype))
        b = case.input(rng.standard_normal(sb).astype(dtype))
    compiled, replayed, plan = case.run(executor, [case.ops.matmul(a, b)])
    tol = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(compiled[0], replayed[0], rtol=tol, atol=tol)
    assert compiled[0].shape == replayed[0].shape
    assert any(isinstance(s, Matmul) for s in plan.schedule.steps)


def test_linear_backward_and_sliced_operands(executor, rng):
    case = Case()
    x = case.input(rng.standard_normal((3, 20, 8)).astype(np.float32))
    w = case.input(rng.standard_normal((8, 6)).astype(np.float32))
    g = case.input(rng.standard_normal((3, 20, 6)).astype(np.float32))
    gx, gw, gb = case.ops.linear_backward(x, w, g, True, True, True)
    sliced = case.ops.matmul(case.ops.slice(x, ((0, 3, 2), (1, 20, 3))), w)  # steps: packed or looped
    compiled, replayed, _ = case.run(
        executor, [gx, gw, gb, sliced, case.ops.linear(x, w, case.input(rng.standard_normal(6).astype(np.float32)))]
    )
    for i, (a, e) in enumerate(zip(compiled, replayed)):
        np.testing.assert_allclose(a, e, rtol=2e-5, atol=2e-5, err_msg=str(i))


def test_matrix_vector_products_read_strided_vectors(matmul_executor, rng):
    """A row or column that is a strided view (every third element of a matrix) is
    gemv's vector with its increment."""
    case = Case()
    x = case.input(rng.standard_normal((40, 3)).astype(np.float32))
    w = case.input(rng.standard_normal((40, 30)).astype(np.float32))
    v = case.input(rng.standard_normal((30, 40)).astype(np.float32))
    column = case.ops.slice(x, ((0, 40, 1), (1, 2, 1)))  # [40, 1], stride 3
    row = case.ops.permute(column, (1, 0))  # [1, 40], stride 3
    compiled, replayed, _ = case.run(matmul_executor, [case.ops.matmul(row, w), case.ops.matmul(v, column)])
    for a, e in zip(compiled, replayed):
        np.testing.assert_allclose(a, e, rtol=2e-5, atol=2e-5)


def test_without_blas_large_matmuls_stay_on_flex(rng):
    from ember.backend.fusion.llvm.support import LLVMTarget

    executor = LLVMExecutor()
    executor.blas, executor.target = None, LLVMTarget(None)
    case = Case()
    a = case.input(rng.standard_normal((64, 64)).astype(np.float32))
    small = case.input(rng.standard_normal((4, 3)).astype(np.float32))
    big = case.ops.unary(UnaryOp.EXP, case.ops.matmul(a, a))
    tiny = case.ops.matmul(small, case.ops.permute(small, (1, 0)))
    compiled, replayed, plan = case.run(executor, [big, tiny])
    for a_, e in zip(compiled, replayed):
        np.testing.assert_allclose(a_, e, rtol=2e-5)
    calls = [s.node.op for s in plan.schedule.steps if isinstance(s, Call)]
    assert calls == ["matmul"] and any(isinstance(s, Matmul) for s in plan.schedule.steps)


# ---------------------------------------------------------------------- scalars and memory
def test_runtime_scalars_change_results_without_a_new_plan(executor, rng):
    device = Device.flex().fusion()
    backend = device.backend
    if not isinstance(backend.executor, LLVMExecutor):
        pytest.skip("the LLVM executor is not the default here")
    device.sync()  # ops another test left queued run now, not with the first step below
    x = Tensor.from_data(rng.standard_normal((4, 8)).astype(np.float32), device=device)
    results = []
    for lr in (0.1, 0.2, 0.1, 3.0):
        results.append(x.mul_scalar(lr).exp().sum_dim(1).to_data().to_numpy())
        if len(results) == 1:
            built = backend.stats["plans_built"]
    assert backend.stats["plans_built"] == built
    x_np = x.to_data().to_numpy()
    for lr, got in zip((0.1, 0.2, 0.1, 3.0), results):
        np.testing.assert_allclose(got, np.exp(x_np * np.float32(lr)).sum(1, keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(results[0], results[2])


def test_adam_runtime_scalars_follow_lr_and_time(executor, rng):
    shapes = [(4, 16), (16,), (16, 1), (1,)]
    params = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    moments = [np.abs(rng.standard_normal(s)).astype(np.float32) for s in shapes]
    flex = FlexBackend()

    def graph(lr, time, weight_decay):
        case = Case()
        p = [case.input(a) for a in params]
        g = [case.input(a) for a in grads]
        m1 = [case.input(a) for a in moments]
        m2 = [case.input(a * a) for a in moments]
        outs, ms, vs, _ = case.ops.adam_step_many(
            p,
            g,
            m1,
            m2,
            None,
            lr=lr,
            beta_1=0.9,
            beta_2=0.999,
            epsilon=1e-5,
            weight_decay=weight_decay,
            decoupled=False,
            amsgrad=False,
            time=time,
        )
        graph, scalars = case.abstract(outs + ms + vs)
        return graph, scalars, case.values

    plan = executor.plan(graph(1e-3, 2, 0.0)[0])
    for lr, time, weight_decay in ((1e-3, 2, 0.0), (5e-2, 7, 0.0), (1e-2, 3, 0.1), (1e-3, 2, 0.0)):
        g, scalars, values = graph(lr, time, weight_decay)
        assert executor.plan(g) is plan  # one structure, one plan
        got = plan.run(flex, values, scalars)
        expected = flex.adam_step_many(
            params,
            grads,
            moments,
            [m * m for m in moments],
            None,
            lr=lr,
            beta_1=0.9,
            beta_2=0.999,
            epsilon=1e-5,
            weight_decay=weight_decay,
            decoupled=False,
            amsgrad=False,
            time=time,
        )
        for a, e in zip(got, expected[0] + expected[1] + expected[2]):
            np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-7)
    # weight_decay=0 skips a term: its zero-ness is a guard, so two variants were compiled.
    assert len(plan.variants) == 2


def test_outputs_are_not_overwritten_by_later_runs(executor, rng):
    case = Case()
    x = case.input(rng.standard_normal(64).astype(np.float32))
    y = case.ops.unary(UnaryOp.EXP, case.ops.binary(BinaryOp.MUL, x, 2.0))
    z = case.ops.reduce(ReduceOp.SUM, y, 0)
    graph, scalars = case.abstract([y, z])
    plan = executor.plan(graph)
    flex = FlexBackend()
    first = plan.run(flex, case.values, scalars)
    view = first[0][::2]  # a view keeps its base alive
    kept = [a.copy() for a in first]
    del first
    for k in range(6):  # more runs than a buffer's pool holds
        plan.run(flex, [np.full(64, float(k), np.float32)], scalars)
    np.testing.assert_array_equal(view, kept[0][::2])
    assert plan.memory.outputs and not any(b in plan.memory.offsets for b in plan.memory.outputs)
    # A result nothing references any more is reused rather than reallocated.
    addresses = {plan.run(flex, case.values, scalars)[0].ctypes.data for _ in range(6)}
    assert len(addresses) == 1


def test_arena_reuses_dead_buffers(executor, rng):
    case = Case()
    x = case.input(rng.standard_normal((32, 32)).astype(np.float32))
    h = x
    for _ in range(6):  # each matmul's result dies at the next one
        h = case.ops.matmul(h, x)
    compiled, replayed, plan = case.run(executor, [case.ops.reduce(ReduceOp.SUM, h, 0)])
    np.testing.assert_allclose(compiled[0], replayed[0], rtol=1e-4)
    assert plan.memory.arena_bytes <= 2 * 32 * 32 * 4


def test_unlowered_nodes_run_on_flex_between_segments(executor, rng):
    case = Case()
    x = case.input(rng.standard_normal((6, 5)).astype(np.float32))
    idx = case.input(np.array([0, 2, 4], np.int64))
    e = case.ops.unary(UnaryOp.EXP, x)
    g = case.ops.select(e, 1, idx)  # flex
    s = case.ops.cumulative(CumulativeOp.CUMSUM, e, 1)  # flex
    out = case.ops.binary(BinaryOp.ADD, case.ops.cat([g, g], 1), 1.0)
    h = case.ops.cast(case.ops.binary(BinaryOp.MUL, x, 3.0), DType.FLOAT16)  # float16: flex
    compiled, replayed, plan = case.run(executor, [out, s, h])
    for a, e_ in zip(compiled, replayed):
        np.testing.assert_allclose(a.astype(np.float64), e_.astype(np.float64), rtol=1e-6)
    kinds = [type(step).__name__ for step in plan.schedule.steps]
    assert "Call" in kinds and "Kernel" in kinds


@pytest.mark.replays("the fallback itself is under test")
def test_a_graph_that_fails_to_compile_runs_op_by_op_with_a_warning(monkeypatch, rng):
    import ember.backend.fusion.llvm.variant as module

    def broken(*args, **kwargs):
        raise RuntimeError("a lowering bug")

    executor = LLVMExecutor()
    monkeypatch.setattr(module, "schedule", broken)
    case = Case()
    x = case.input(rng.standard_normal(8).astype(np.float32))
    with pytest.warns(FallbackWarning, match="a lowering bug"):
        compiled, replayed, plan = case.run(executor, [case.ops.unary(UnaryOp.EXP, x)], lowered=False)
    assert_same(compiled[0], replayed[0], "fallback")
    assert plan.replay is not None and not plan.variants


# ---------------------------------------------------------------------- training
def _seed_losses(device, steps: int) -> list[float]:
    from ember import Distribution
    from ember.nn.loss import MseLoss, Reduction
    from ember.optim import AdamConfig, GradientsParams

    device.seed(42)
    x = Tensor.random([64, 4], Distribution.uniform(-1.0, 1.0), device=device)
    y = x.matmul(Tensor.from_floats([[1.0], [-2.0], [0.5], [3.0]], device=device)).add_scalar(0.5)
    model = Mlp.new(device)
    optim = AdamConfig().init()
    losses = []
    for _ in range(steps):
        loss = MseLoss().forward(model(x), y, Reduction.MEAN)
        losses.append(loss.into_scalar())
        model = optim.step(1e-2, model, GradientsParams.from_grads(loss.backward(), model))
    return losses


def test_seed_training_matches_eager_and_is_deterministic():
    fused = Device.flex().fusion().autodiff()
    if not isinstance(fused.inner().backend.executor, LLVMExecutor):
        pytest.skip("the LLVM executor is not the default here")
    eager = np.array(_seed_losses(Device.flex().autodiff(), 200))
    first = np.array(_seed_losses(fused, 200))
    second = np.array(_seed_losses(fused, 200))
    np.testing.assert_allclose(first, eager, rtol=1e-5)
    np.testing.assert_array_equal(first, second)


def test_compiled_steps_run_on_the_llvm_executor():
    """``ember.compile`` hands its traced step to any executor: this one too."""
    import ember
    from ember.nn.loss import MseLoss, Reduction
    from ember.optim import AdamConfig, GradientsParams
    from tests.capture.test_compile import seed_problem

    def losses(executor):
        device = Device.flex().autodiff()
        x, y, model = seed_problem(device)
        optim = AdamConfig().init()

        def train_step(model, x, y, lr):
            loss = MseLoss().forward(model(x), y, Reduction.MEAN)
            return optim.step(lr, model, GradientsParams.from_grads(loss.backward(), model)), loss

        step = train_step if executor is None else ember.compile(train_step, executor=executor)
        out = []
        for _ in range(60):
            model, loss = step(model, x, y, 1e-2)
            out.append(loss.into_scalar())
        return np.array(out)

    executor = LLVMExecutor()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no graph break, no fallback
        compiled = losses(executor)
    np.testing.assert_allclose(compiled, losses(None), rtol=1e-5)
    assert executor.stats["plans"] >= 1


# ---------------------------------------------------------------------- selection
def test_flex_fusion_devices_compile_by_default():
    assert isinstance(executors.default_executor(FlexBackend()), LLVMExecutor)
    assert executors.default_executor(FlexBackend()) is executors.default_executor(FlexBackend())


def test_missing_llvmlite_falls_back_to_replay_with_one_notice(monkeypatch):
    monkeypatch.setitem(sys.modules, "ember.backend.fusion.llvm", None)  # the import now fails
    executors.reset()
    try:
        with pytest.warns(RuntimeWarning, match="LLVM executor is unavailable"):
            first = executors.default_executor(FlexBackend())
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            backend = FusionBackend(FlexBackend())  # no second notice
        assert isinstance(first, executors.ReplayExecutor)
        assert isinstance(backend.executor, executors.ReplayExecutor)
        x = backend.from_numpy(np.array([1.0, 2.0], np.float32))
        y = backend.unary(UnaryOp.EXP, backend.binary(BinaryOp.MUL, x, 2.0))
        np.testing.assert_allclose(backend.to_numpy(y), np.exp([2.0, 4.0]), rtol=1e-6)
        monkeypatch.setenv(executors.EXECUTOR_ENV, "llvm")
        with pytest.raises(Exception, match="llvmlite"):
            executors.default_executor(FlexBackend())
    finally:
        monkeypatch.undo()
        executors.reset()
    assert isinstance(executors.default_executor(FlexBackend()), LLVMExecutor)


def test_short_segments_are_called_as_builtins_and_long_ones_through_ctypes(executor, rng):
    import ctypes

    from ember.backend.fusion.llvm import native_calls as module

    if module.NATIVE is None:
        pytest.skip("no CPython API")
    flex = FlexBackend()
    for n, native in ((64, True), (1 << 18, False)):
        case = Case()
        x = case.input(rng.standard_normal(n).astype(np.float32))
        graph, scalars = case.abstract([case.ops.unary(UnaryOp.EXP, case.ops.binary(BinaryOp.MUL, x, 0.5))])
        plan = executor.plan(graph)
        plan.run(flex, list(case.values), scalars)
        variant = plan.variants[-1]
        (entry,) = variant._entries
        assert isinstance(entry, ctypes._CFuncPtr) != native
        owner = variant._native_defs
        before = sys.getrefcount(owner)
        for _ in range(200):
            out = plan.run(flex, list(case.values), scalars)
        assert sys.getrefcount(owner) == before  # the builtin's result (its owner) is released
        np.testing.assert_allclose(out[0], np.exp(case.values[0] * np.float32(0.5)), rtol=1e-6)


def test_a_plan_keeps_no_input_alive(executor, rng):
    import gc
    import weakref

    case = Case()
    x = case.input(rng.standard_normal(32).astype(np.float32))
    graph, scalars = case.abstract([case.ops.unary(UnaryOp.EXP, x)])
    plan = executor.plan(graph)
    flex = FlexBackend()
    array = rng.standard_normal(32).astype(np.float32)
    first = plan.run(flex, [array], scalars)[0]
    again = plan.run(flex, [array], scalars)[0]  # bound once, remembered weakly
    np.testing.assert_array_equal(first, again)
    ref = weakref.ref(array)
    del array
    gc.collect()
    assert ref() is None
    other = np.zeros(32, np.float32)  # may take the freed array's place: bound anew
    np.testing.assert_array_equal(plan.run(flex, [other], scalars)[0], np.ones(32, np.float32))


# ---------------------------------------------------------------------- decoding's ops
def test_embedding_and_arange_compile_without_eager_calls(executor, rng):
    """A decode step's embedding lookups run as gather loops and its fixed-size
    aranges are constants: nothing is left to flex between compiled segments."""
    case = Case()
    table = case.input(rng.standard_normal((50, 8)).astype(np.float32))
    ids = case.input(np.array([[3, 49], [0, 7]], np.int64))
    slots = case.ops.arange(0, 6, 1, DType.INT64)
    shifted = case.ops.binary(BinaryOp.SUB, slots, case.input(np.array([2], np.int64)))
    rows = case.ops.embedding(table, ids)
    compiled, replayed, plan = case.run(executor, [rows, shifted, case.ops.arange(2, 11, 3, DType.INT32)])
    for a, e in zip(compiled, replayed):
        assert_same(a, e, "decode ops")
    assert not [s.node.op for s in plan.schedule.steps if isinstance(s, Call)]


def test_a_compiled_embedding_checks_its_indices(executor, rng):
    from ember.backend.fusion.replay import PartialRun
    from ember.errors import IndexOutOfBoundsError

    case = Case()
    table = case.input(rng.standard_normal((5, 4)).astype(np.float32))
    ids = case.input(np.array([[1, 5]], np.int64))
    graph, scalars = case.abstract([case.ops.embedding(table, ids)])
    with pytest.raises(PartialRun) as caught:
        executor.plan(graph).run(FlexBackend(), list(case.values), scalars)
    assert isinstance(caught.value.error, IndexOutOfBoundsError) and "index 5 is out of bounds" in str(caught.value)
