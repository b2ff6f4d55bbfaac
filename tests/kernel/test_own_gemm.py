"""ember's own float32 product (ember/backend/kernel/llvm/gemm.py) against float64 numpy,
with both blockings (AVX-512's 12x32 tiles and AVX2's 6x16: LLVM legalises either on
any host), at shapes that leave partial panels and tiles on every edge, strided
operands (a leading dimension larger than the row) and ``accumulate``."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from llvmlite import ir

from ember.backend.kernel.llvm import jit
from ember.backend.kernel.llvm.gemm import Blocking, blocking, gemm_function, pack_a_floats, pack_b_floats

_P, _L = ctypes.c_void_p, ctypes.c_int64
_SIGNATURE = ctypes.CFUNCTYPE(None, _L, _L, _L, _P, _L, _P, _L, _P, _L, ctypes.c_bool, _P, _P)
_COMPILED: dict[Blocking, tuple] = {}


def _product(block: Blocking):
    if block not in _COMPILED:
        module = ir.Module(name="gemm_test")
        module.triple = jit.triple()
        module.data_layout = jit.data_layout()
        gemm_function(module, "gemm_test", block, jit.vector_width())
        compiled = jit.compile_module(str(module), ["gemm_test"])
        _COMPILED[block] = (_SIGNATURE(compiled.addresses["gemm_test"]), compiled)
    return _COMPILED[block][0]


def _run(block, a, b, c, accumulate):
    m, k = a.shape
    n = b.shape[1]
    pack_a = np.full(pack_a_floats(block, m, k), np.nan, np.float32)  # the product must not read stale packs
    pack_b = np.full(pack_b_floats(block, n, k), np.nan, np.float32)
    _product(block)(
        m, n, k, a.ctypes.data, a.strides[0] // 4, b.ctypes.data, b.strides[0] // 4, c.ctypes.data,
        c.strides[0] // 4, accumulate, pack_a.ctypes.data, pack_b.ctypes.data,
    )  # fmt: skip


BLOCKINGS = [blocking(512), blocking(None), Blocking(8, 6, kc=16, nc=40, mc=12)]  # the last: many blocks
SHAPES = [(1, 1, 1), (5, 7, 3), (12, 32, 16), (13, 33, 17), (25, 65, 300), (64, 49, 577), (3, 200, 1)]


@pytest.mark.parametrize("block", BLOCKINGS, ids=lambda b: f"{b.mr}x{b.nr}k{b.kc}n{b.nc}")
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("accumulate", [False, True])
def test_product_matches_float64_numpy(rng, block, shape, accumulate):
    m, n, k = shape
    # Operands inside larger arrays: each row's leading dimension is longer than the row.
    a = rng.standard_normal((m, k + 3)).astype(np.float32)[:, :k]
    b = rng.standard_normal((k, n + 5)).astype(np.float32)[:, :n]
    c_full = rng.standard_normal((m, n + 2)).astype(np.float32)
    before = c_full.copy()
    c = c_full[:, :n]
    _run(block, a, b, c, accumulate)
    want = a.astype(np.float64) @ b.astype(np.float64) + (before[:, :n] if accumulate else 0.0)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64) + np.abs(before[:, :n])
    assert np.all(np.abs(c - want) <= 1e-6 * k * scale + 1e-30)
    np.testing.assert_array_equal(c_full[:, n:], before[:, n:])  # past each row: untouched


def test_pack_sizes_cover_the_blocks():
    block = blocking(512)
    assert pack_a_floats(block, 13, 1000) == 24 * block.kc
    assert pack_a_floats(block, 10_000, 10) == block.mc * 10
    assert pack_b_floats(block, 33, 10) == 64 * 10
    assert pack_b_floats(block, 10_000, 10) == block.nc * 10
