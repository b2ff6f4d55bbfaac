"""The CUDA C lowering's semantics, checked on the host against flex (numpy).

The expression code the cuda backend generates (:mod:`ember.backend.cuda.lowering`
with the helpers of :mod:`ember.backend.cuda.prelude`) is plain C++ apart from a
few CUDA intrinsics; here it is compiled for the CPU with g++ (shims for the bit casts,
``_Float16`` for half conversions) and run on special values: signed zeros, infinities,
NaN, integer extremes, zero divisors, shifts past the width. Results must equal flex's
bit for bit for exact ops (arithmetic, Python-style division and remainder, casts,
comparisons, bitwise and logical ops, rounding) and agree closely for library functions
(the host's libm stands in for CUDA's). No GPU is needed; skipped without g++.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

from ember.backend.cuda.dtypes import load_code, storage_type, store_code
from ember.backend.cuda.lowering import LOWERED_BINARY, LOWERED_UNARY, CExpr
from ember.backend.cuda.prelude import COMMON
from ember.backend.dtype import DType
from ember.backend.flex import FlexBackend
from ember.backend.kernel.exprs import Exprs
from ember.backend.kernel.views import View
from ember.backend.ops import BinaryOp, UnaryOp

SHIMS = r"""
#include <cmath>
#include <cstring>
#include <cstdint>
using namespace std;
#define __device__
#define __forceinline__ inline
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }
static inline double __longlong_as_double(long long i) { double f; memcpy(&f, &i, 8); return f; }
static inline float ld_f16(unsigned short h) { _Float16 x; memcpy(&x, &h, 2); return (float)x; }
static inline unsigned short st_f16(float f) { _Float16 x = (_Float16)f; unsigned short h; memcpy(&h, &x, 2); return h; }
"""

# Library functions: the host's libm against numpy (CUDA's own are within 2 ulp of both).
_LIBM = {
    UnaryOp.EXP,
    UnaryOp.LOG,
    UnaryOp.LOG1P,
    UnaryOp.EXPM1,
    UnaryOp.SIN,
    UnaryOp.COS,
    UnaryOp.TAN,
    UnaryOp.TANH,
    UnaryOp.SINH,
    UnaryOp.COSH,
    UnaryOp.ASIN,
    UnaryOp.ACOS,
    UnaryOp.ATAN,
    UnaryOp.ERF,
    UnaryOp.LOG2,
    UnaryOp.EXP2,
    UnaryOp.ASINH,
    UnaryOp.ACOSH,
    UnaryOp.ATANH,
    UnaryOp.LOG10,
    UnaryOp.RSQRT,
    BinaryOp.POW,
    BinaryOp.ATAN2,
}
DTYPES = [
    DType.FLOAT64,
    DType.FLOAT32,
    DType.FLOAT16,
    DType.BFLOAT16,
    DType.INT64,
    DType.INT32,
    DType.UINT8,
    DType.BOOL,
]


def _values(dtype: DType) -> tuple[np.ndarray, np.ndarray]:
    """Operand pairs: every combination of the dtype's special values."""
    if dtype.is_float:
        v = np.array(
            [-np.inf, -1e30, -7.25, -3.5, -2.5, -1.0, -0.5, -0.0, 0.0, 0.3, 0.5, 1.0, 2.5, 3.0, 1e30, np.inf, np.nan],
            np.float64,
        )
    elif dtype is DType.BOOL:
        v = np.array([False, True])
    elif dtype is DType.UINT8:
        v = np.array([0, 1, 2, 7, 8, 9, 128, 255])
    else:
        lo, hi = dtype.int_range
        v = np.array([lo, lo + 1, -65, -9, -7, -2, -1, 0, 1, 2, 3, 7, 31, 32, 63, 64, hi])
    a, b = np.meshgrid(v, v, indexing="ij")
    with np.errstate(over="ignore"):
        return a.reshape(-1).astype(dtype.np), b.reshape(-1).astype(dtype.np)


def _function(name: str, expr, dtypes: list[np.dtype]) -> str:
    cx = CExpr(lambda e: load_code(e.dtype, f"in{e.op}[i]"), lambda e: "0")
    v = cx.value(expr)
    params = ", ".join(f"const {storage_type(d)}* in{k}" for k, d in enumerate(dtypes))
    body = "\n    ".join(cx.lines)
    return (
        f'extern "C" void {name}({params}, {storage_type(expr.dtype)}* out, long long n) {{\n'
        f"  for (long long i = 0; i < n; ++i) {{\n    {body}\n    out[i] = {store_code(expr.dtype, v)};\n  }}\n}}\n"
    )


def _cases():
    flex = FlexBackend()
    cases = []  # (name, fn_source, inputs, expected, exact)
    for dtype in DTYPES:
        a, b = _values(dtype)
        d = dtype.np
        fam = "f" if dtype.is_float else "u" if dtype is DType.UINT8 else "b" if dtype is DType.BOOL else "i"
        for op in UnaryOp:
            if op not in LOWERED_UNARY[fam]:
                continue
            out = flex.unary(op, a)
            x = Exprs()
            e = x.make("unary", op, (x.load(0, View.contiguous((1,)), d),), out.dtype)
            cases.append((f"u_{op}_{dtype.value}", e, [a], out, op not in _LIBM))
        for op in BinaryOp:
            if op not in LOWERED_BINARY[fam] or (op == BinaryOp.DIV and not dtype.is_float):
                continue
            out = flex.binary(op, a, b)
            x = Exprs()
            e = x.make(
                "binary", op, (x.load(0, View.contiguous((1,)), d), x.load(1, View.contiguous((1,)), d)), out.dtype
            )
            cases.append((f"b_{op}_{dtype.value}", e, [a, b], out, op not in _LIBM))
        for other in DTYPES:
            if other is dtype or (dtype.is_float and other is DType.UINT8):
                continue  # float -> uint8 wraps through a wider int in numpy: not a contract
            src = (
                a[np.isfinite(a.astype(np.float64)) & (np.abs(a.astype(np.float64)) < 1e9)]
                if dtype.is_float and not other.is_float and other is not DType.BOOL
                else a
            )
            out = flex.cast(src, other)
            x = Exprs()
            e = x.make("cast", None, (x.load(0, View.contiguous((1,)), d),), other.np)
            cases.append((f"c_{dtype.value}_{other.value}", e, [src], out, True))
    return cases


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    cases = _cases()
    source = (
        SHIMS
        + COMMON
        + "\n".join(_function(f"f{i}", e, [t.dtype for t in inputs]) for i, (_, e, inputs, _, _) in enumerate(cases))
    )
    folder = tmp_path_factory.mktemp("host")
    (folder / "k.cpp").write_text(source)
    subprocess.run(
        [
            "g++",
            "-std=c++17",
            "-O1",
            "-ffp-contract=off",
            "-fno-fast-math",
            "-shared",
            "-fPIC",
            "-o",
            str(folder / "k.so"),
            str(folder / "k.cpp"),
        ],
        check=True,
        capture_output=True,
    )
    return ctypes.CDLL(str(folder / "k.so")), cases


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in units of the last place (float32 or float64 grids)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(over="ignore"):
        scale = np.spacing(np.maximum(np.abs(a), np.abs(b)).astype(np.float32)).astype(np.float64)
    with np.errstate(invalid="ignore"):
        return np.where(a == b, 0.0, np.abs(a - b) / scale)


def test_lowered_ops_match_flex(compiled):
    lib, cases = compiled
    failures = []
    for i, (name, _, inputs, expected, exact) in enumerate(cases):
        out = np.empty(expected.shape, expected.dtype)
        args = [np.ascontiguousarray(x).ctypes.data_as(ctypes.c_void_p) for x in inputs]
        getattr(lib, f"f{i}")(*args, out.ctypes.data_as(ctypes.c_void_p), ctypes.c_longlong(out.size))
        if exact or expected.dtype.kind in "biu":
            o64, e64 = out.astype(np.float64), expected.astype(np.float64)
            same = (o64 == e64) | (np.isnan(o64) & np.isnan(e64))
            if out.dtype in (np.float32, np.float64):  # flex's half types are loose about the sign of zero
                same &= (np.signbit(o64) == np.signbit(e64)) | np.isnan(e64)
            if not np.all(same):
                bad = np.flatnonzero(~same.reshape(-1))[:3]
                failures.append(
                    f"{name}: at {[tuple(x[j] for x in inputs) for j in bad]} got "
                    f"{out.reshape(-1)[bad]} expected {expected.reshape(-1)[bad]}"
                )
        else:
            e64, o64 = expected.astype(np.float64), out.astype(np.float64)
            nan_ok = np.isnan(e64) == np.isnan(o64)
            ulps = _ulps(o64[~np.isnan(e64)], e64[~np.isnan(e64)])
            if not np.all(nan_ok) or (ulps.size and np.nanmax(ulps) > 8):
                failures.append(
                    f"{name}: NaN agreement {np.all(nan_ok)}, max ulps {np.nanmax(ulps) if ulps.size else 0}"
                )
    assert not failures, f"{len(failures)} of {len(cases)} cases differ:\n" + "\n".join(failures[:40])
