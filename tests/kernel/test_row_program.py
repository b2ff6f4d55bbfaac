"""Row programs (ember.backend.kernel.steps.RowProgram) and their LLVM printer: sizes
are arguments (one compile, any shape), passes share the loop over rows and read the
reductions of earlier ones, conditional passes, strided column blocks, the op table's
kernel functions; and flex's native kernels, written as row programs, against float64
numpy and as one module the object cache can keep."""

from __future__ import annotations

import ctypes
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from llvmlite import ir

from ember.backend.kernel.llvm import jit
from ember.backend.kernel.llvm.row_program import print_programs
from ember.backend.kernel.op_table import KernelFn
from ember.backend.kernel.row_exprs import DENSE, F32, I32, PER_COLUMN, PER_ROW, RowExprs
from ember.backend.kernel.steps import Pass, Reduction, RowProgram, RowStore, RowView
from ember.backend.ops import BinaryOp, ReduceOp, UnaryOp

_P = ctypes.c_void_p


def _compile(programs, argtypes):
    module = ir.Module(name="test_rows")
    print_programs(module, programs)
    compiled = jit.compile_module(str(module), [p.name for p in programs])
    fns = [ctypes.CFUNCTYPE(None, *types)(compiled.addresses[p.name]) for p, types in zip(programs, argtypes)]
    return compiled, fns  # the caller keeps ``compiled`` (its engine) alive


def _centre_program() -> RowProgram:
    """``centre(x, gamma, block, out, peak, rows, cols, scale, flags)``: per row, ``out =
    (x - max(x)) * gamma + mean(x) * scale + block 1 of x's [rows, 2 cols] twin``,
    with the row's max stored only when bit 0 of ``flags`` is set."""
    x = RowExprs()
    value = x.read(0)
    top = x.acc(0, 0)
    mean = x.div(x.acc(0, 1), x.cast(x.size(1), F32))
    out = x.add(
        x.add(x.mul(x.sub(value, top), x.read(1, PER_COLUMN)), x.mul(mean, x.scalar(0, F32))),
        x.read(2, RowView(2, 0, 1, 1)),
    )
    wanted = x.bin(BinaryOp.NE, x.bin(BinaryOp.BITWISE_AND, x.scalar(1, I32), x.c(1, I32)), x.c(0, I32))
    passes = [
        Pass(reductions=[Reduction(ReduceOp.MAX, value, F32, 0), Reduction(ReduceOp.SUM, value, F32, 0)]),
        Pass(stores=[RowStore(3, DENSE, out)]),
        Pass(stores=[RowStore(4, PER_ROW, top)], when=wanted),
    ]
    return RowProgram("centre", [F32] * 5, [F32, I32], passes)


def test_one_compile_runs_every_shape_with_passes_sharing_the_row_loop(rng):
    program = _centre_program()
    types = [_P] * 5 + [ctypes.c_int64, ctypes.c_int64, ctypes.c_float, ctypes.c_int32]
    _keep, (centre,) = _compile([program], [types])
    for rows, cols in [(1, 1), (3, 5), (7, 64), (2, 1000), (0, 4)]:
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        gamma = rng.standard_normal(cols).astype(np.float32)
        twin = rng.standard_normal((rows, 2 * cols)).astype(np.float32)
        for flags in (0, 1):
            out = np.full((rows, cols), np.nan, np.float32)
            peak = np.full(rows, -7.0, np.float32)
            centre(
                x.ctypes.data,
                gamma.ctypes.data,
                twin.ctypes.data,
                out.ctypes.data,
                peak.ctypes.data,
                rows,
                cols,
                0.5,
                flags,
            )
            x64 = x.astype(np.float64)
            top = x64.max(axis=1, keepdims=True)
            want = (x64 - top) * gamma + x64.mean(axis=1, keepdims=True) * 0.5 + twin[:, cols:]
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(peak, top[:, 0] if flags else np.full(rows, -7.0))


def test_float32_max_is_the_ordered_key_maximum():
    """NaN with the sign bit clear ranks above inf; with it set, below -inf."""
    x = RowExprs()
    program = RowProgram(
        "peak",
        [F32, F32],
        [],
        [Pass(reductions=[Reduction(ReduceOp.MAX, x.read(0), F32, 0)])],
        [RowStore(1, PER_ROW, x.acc(0, 0))],
    )
    _keep, (peak,) = _compile([program], [[_P, _P, ctypes.c_int64, ctypes.c_int64]])
    negative_nan = np.array([0xFFC00000], np.uint32).view(np.float32)[0]
    rows = np.array(
        [
            [1.0, np.inf, np.nan, -2.0],
            [1.0, -np.inf, negative_nan, -2.0],
            [-np.inf, -np.inf, negative_nan, -np.inf],
            [-0.0, 0.0, -1.0, -3.0],
        ],
        np.float32,
    )
    out = np.empty(4, np.float32)
    peak(rows.ctypes.data, out.ctypes.data, 4, 4)
    assert np.isnan(out[0]) and not np.signbit(out[0])
    assert out[1] == 1.0 and out[2] == -np.inf
    assert out[3] == 0.0 and not np.signbit(out[3])  # +0 ranks above -0


def test_kernel_functions_of_the_op_table_against_float64():
    x = RowExprs()
    v = x.read(0, PER_COLUMN)
    stores = [
        RowStore(1, PER_COLUMN, x.un(KernelFn.EXP_FLUSHED, v)),
        RowStore(2, PER_COLUMN, x.un(KernelFn.NORMAL_TAIL, x.un(UnaryOp.ABS, v))),
    ]
    program = RowProgram("fns", [F32] * 3, [], [Pass(stores=stores)], by_rows=False)
    _keep, (fns,) = _compile([program], [[_P, _P, _P, ctypes.c_int64]])
    values = np.concatenate(
        [
            np.linspace(-110, 95, 4001, dtype=np.float32),
            np.float32([-87.4, -87.3, 88.7, 88.8, np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-30]),
        ]
    )
    e, q = np.empty_like(values), np.empty_like(values)
    fns(values.ctypes.data, e.ctypes.data, q.ctypes.data, values.size)
    v64 = values.astype(np.float64)
    with np.errstate(over="ignore"):
        want = np.where(v64 < -87.33654, 0.0, np.exp(v64))
    finite = np.isfinite(want) & (want < 3.4e38)
    np.testing.assert_allclose(e[finite], want[finite], rtol=3e-7)
    assert np.all(e[v64 > 88.72283] == np.inf) and np.isnan(e[np.isnan(v64)]).all()
    assert np.all(e[(v64 < -87.33654)] == 0.0)  # nothing subnormal
    tail = 0.5 * np.array([math.erfc(abs(t) / math.sqrt(2.0)) for t in v64])
    ok = ~np.isnan(v64)
    np.testing.assert_allclose(q[ok], tail[ok], atol=2e-7)


# ---------------------------------------------------------------------- flex's kernels
@pytest.fixture(scope="module")
def kernels():
    from ember.backend.flex import native

    compiled = native.kernels()
    if compiled is None:
        pytest.skip("llvmlite cannot compile for this host")
    return compiled


def _address(a: np.ndarray) -> int:
    return a.ctypes.data


@pytest.mark.parametrize("rows, cols", [(1, 1), (4, 33), (16, 300)])
def test_flex_softmax_and_layer_norm_rows_against_float64(kernels, rng, rows, cols):
    x = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
    if rows > 2:
        x[1] = -np.inf  # an empty row: zeros for attention, NaN as numpy otherwise
        x[2, ::2] = -np.inf
    x64 = x.astype(np.float64)
    for empty_zero in (0, 1):
        out = np.empty_like(x)
        kernels.softmax_rows(_address(x), _address(out), rows, cols, empty_zero)
        with np.errstate(invalid="ignore"):
            shifted = np.exp(x64 - x64.max(axis=1, keepdims=True))
            want = shifted / shifted.sum(axis=1, keepdims=True)
        if rows > 2 and empty_zero:
            want[1] = 0.0
        np.testing.assert_allclose(out, want, rtol=2e-6, atol=1e-7)
    x = rng.standard_normal((rows, cols)).astype(np.float32) * 3 + 1
    gamma, beta = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    out, mean, rstd = np.empty_like(x), np.empty(rows, np.float32), np.empty(rows, np.float32)
    kernels.layer_norm(*map(_address, (x, gamma, beta, out, mean, rstd)), rows, cols, 1e-5)
    x64 = x.astype(np.float64)
    m = x64.mean(axis=1, keepdims=True)
    r = 1 / np.sqrt(((x64 - m) ** 2).mean(axis=1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out, (x64 - m) * r * gamma + beta, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mean, m[:, 0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rstd, r[:, 0], rtol=1e-4)
    g = rng.standard_normal((rows, cols)).astype(np.float32)
    xhat = (x64 - m) * r
    h = g * gamma
    want_dx = r * (h - h.mean(axis=1, keepdims=True) - xhat * (h * xhat).mean(axis=1, keepdims=True))
    for need in (1, 2, 3):
        dx = np.full_like(x, 9.0)
        dgamma, dbeta = np.zeros(cols, np.float32), np.zeros(cols, np.float32)
        kernels.layer_norm_backward(*map(_address, (x, gamma, mean, rstd, g, dx, dgamma, dbeta)), rows, cols, need)
        if need & 1:
            np.testing.assert_allclose(dx, want_dx, rtol=1e-3, atol=1e-4)
        else:
            assert np.all(dx == 9.0)  # the pass did not run
        if need & 2:
            np.testing.assert_allclose(dgamma, (g * xhat).sum(axis=0), rtol=1e-3, atol=1e-4)
            np.testing.assert_allclose(dbeta, g.astype(np.float64).sum(axis=0), rtol=1e-4, atol=1e-4)
        else:
            assert not dgamma.any() and not dbeta.any()


def test_flex_gelu_and_lstm_cell_against_float64(kernels, rng):
    x = np.concatenate([rng.standard_normal(5000) * 3, [0.0, -0.0, 40.0, -40.0]]).astype(np.float32)
    out, grad = np.empty_like(x), np.empty_like(x)
    g = rng.standard_normal(x.size).astype(np.float32)
    kernels.gelu(_address(x), _address(out), x.size)
    kernels.gelu_backward(_address(x), _address(g), _address(grad), x.size)
    x64 = x.astype(np.float64)
    cdf = np.array([0.5 * math.erfc(-t / math.sqrt(2.0)) for t in x64])
    pdf = np.exp(-(x64**2) / 2) / math.sqrt(2 * math.pi)
    np.testing.assert_allclose(out, x64 * cdf, rtol=2e-6, atol=3e-7)
    np.testing.assert_allclose(grad, g * (cdf + x64 * pdf), rtol=2e-6, atol=3e-7)

    rows, n = 6, 40
    z = rng.standard_normal((rows, 4 * n)).astype(np.float32) * 2
    c = rng.standard_normal((rows, n)).astype(np.float32)
    h_out, c_out = np.empty_like(c), np.empty_like(c)
    kernels.lstm_cell(*map(_address, (z, c, h_out, c_out)), rows, n)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    z64 = z.astype(np.float64)
    i, f, gg, o = sig(z64[:, :n]), sig(z64[:, n : 2 * n]), np.tanh(z64[:, 2 * n : 3 * n]), sig(z64[:, 3 * n :])
    c_new = f * c + i * gg
    np.testing.assert_allclose(c_out, c_new, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h_out, o * np.tanh(c_new), rtol=1e-5, atol=1e-6)
    gh, gc = rng.standard_normal((rows, n)).astype(np.float32), rng.standard_normal((rows, n)).astype(np.float32)
    d_z, d_c = np.empty_like(z), np.empty_like(c)
    kernels.lstm_cell_backward(*map(_address, (z, c, c_out, gh, gc, d_z, d_c)), rows, n)
    tc = np.tanh(c_new)
    dc = gc + gh * o * (1 - tc**2)
    want = np.concatenate([dc * gg * i * (1 - i), dc * c * f * (1 - f), dc * i * (1 - gg**2), gh * tc * o * (1 - o)], 1)
    np.testing.assert_allclose(d_z, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(d_c, dc * f, rtol=1e-5, atol=1e-6)


_MODULE_DIGEST = """
import hashlib, sys
from ember.backend.flex import native
from ember.backend.kernel.llvm import jit
text = native._module()
compiled = jit.compile_module(text, ["ember_gelu"], unroll=True, codegen_opt=3, cache=True)
print(hashlib.sha256(text.encode()).hexdigest(), compiled.optimize_s == 0.0)
"""


@pytest.mark.slow
def test_flex_native_module_is_the_same_in_every_process_and_cached(tmp_path):
    env = {**os.environ, "EMBER_CACHE_DIR": str(tmp_path)}
    env.pop("EMBER_COMPILE_CACHE", None)
    runs = [
        subprocess.run([sys.executable, "-c", _MODULE_DIGEST], env=env, capture_output=True, text=True, check=True)
        for _ in range(2)
    ]
    (first, loaded_first), (second, loaded_second) = (run.stdout.split() for run in runs)
    assert first == second  # the IR keys the cache: it must not vary between processes
    assert loaded_first == "False" and loaded_second == "True"
