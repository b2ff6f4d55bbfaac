"""The kernel layer's LLVM pieces that flex's native kernels use: counted loops with a
run-time trip count (Loops.count), jit.compile_module's options, and the flushed exp."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from llvmlite import ir

from ember.backend.kernel.llvm import jit
from ember.backend.kernel.llvm.loops import Loops
from ember.backend.kernel.llvm.mathlib import F32, F64, I64, MathLib


def _compile(build, name, argtypes, restype=None, **options):
    module = ir.Module(name="test")
    build(module)
    compiled = jit.compile_module(str(module), [name], **options)
    fn = ctypes.CFUNCTYPE(restype, *argtypes)(compiled.addresses[name])
    return fn, compiled  # the caller keeps ``compiled`` (its engine) alive


def _sum_module(module):
    """``double sum(double* x, i64 n)``: a carried float64 over a run-time count."""
    fn = ir.Function(module, ir.FunctionType(F64, [ir.PointerType(), I64]), name="sum")
    x, n = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def body(i, carried):
        value = b.load(b.gep(x, [i], source_etype=F64), typ=F64)
        return [b.fadd(carried[0], value)]

    (total,) = Loops(b).count(n, body, [ir.Constant(F64, 0.5)])
    b.ret(total)


@pytest.mark.parametrize("unroll", [False, True])
def test_count_loop_runs_a_run_time_number_of_times(rng, unroll):
    fn, _keep = _compile(_sum_module, "sum", [ctypes.c_void_p, ctypes.c_int64], ctypes.c_double, unroll=unroll)
    x = rng.standard_normal(37)
    for n in (37, 5, 1):
        assert fn(x.ctypes.data, n) == pytest.approx(0.5 + x[:n].sum(), rel=1e-12)
    # No trip: the carried value keeps its initial one (and nothing is read).
    assert fn(x.ctypes.data, 0) == 0.5
    assert fn(x.ctypes.data, -3) == 0.5


def test_flushed_exp_flushes_subnormals_and_matches_exp_elsewhere():
    def build(module):
        math_lib = MathLib(module)
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType(), ir.PointerType(), I64]), name="e")
        x, out, n = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))

        def body(i, _):
            v = b.load(b.gep(x, [i], source_etype=F32), typ=F32)
            b.store(math_lib.exp_f32_flushed(b, v), b.gep(out, [i], source_etype=F32))
            return []

        Loops(b).count(n, body)
        b.ret_void()

    fn, _keep = _compile(build, "e", [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64])
    x = np.array([-1e4, -100.0, -87.5, -87.0, -1.0, 0.0, 1.0, 80.0, 88.8, 1e4, np.nan, -np.inf, np.inf], np.float32)
    out = np.empty_like(x)
    fn(x.ctypes.data, out.ctypes.data, x.size)
    with np.errstate(over="ignore"):
        expected = np.exp(x.astype(np.float64))
    tiny = np.finfo(np.float32).tiny
    normal = (expected >= tiny) & (expected <= np.finfo(np.float32).max)
    np.testing.assert_allclose(out[normal], expected[normal], rtol=2e-7)
    assert np.all(out[expected < tiny] == 0.0)  # below the smallest normal float32: 0, not a subnormal
    assert np.all(np.isposinf(out[np.isfinite(x) & (expected > np.finfo(np.float32).max)]))
    assert np.isnan(out[x != x]).all() and out[x == np.inf][0] == np.inf
