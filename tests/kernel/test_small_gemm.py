"""The inline float32 matrix product (``ember.backend.kernel.llvm.small_gemm``) compiled
for the host against a float64 numpy product: full and partial row tiles, full and
partial vector tiles, reductions in blocks (with and without a partial last one), a
transposed ``A``, an addend (separate, and ``C`` itself), special values, and the
shapes it declines."""

from __future__ import annotations

import numpy as np
import pytest

from ember.backend.flex.native_pool import compile_entry
from ember.backend.kernel.llvm import jit, small_gemm
from ember.backend.kernel.llvm.small_gemm import Operand

LANES = small_gemm.lanes(jit.vector_width())


def _compiled(m, n, k, trans_a, add):
    def emit(parts):
        kb, (a, b, c) = parts
        lhs = Operand(a, 1, m) if trans_a else Operand(a, k)
        # "c": C itself; "b": B's first m rows (a separate array)
        addend = {None: None, "c": Operand(c, n), "b": Operand(b, n)}[add]
        assert small_gemm.emit_gemm(kb, m, n, k, lhs, Operand(b, n), Operand(c, n), LANES, addend)

    found = compile_entry(emit, f"test_small_gemm_{m}_{n}_{k}_{int(trans_a)}_{add}")
    if found is None:
        pytest.skip("llvmlite cannot compile for this host")
    return found


@pytest.mark.parametrize(
    "m,vectors,k",
    # with A transposed on 16 lanes, rows run in tiles of WIDE_ROWS (12): 32, 25, 17 and
    # 12 rows are whole and partial tiles of it
    [(32, 8, 128), (11, 3, 7), (3, 1, 40), (8, 2, 1), (17, 5, 33), (12, 2, 1100), (5, 1, 768), (25, 3, 600)],
)
@pytest.mark.parametrize("trans_a", [False, True], ids=["a", "a_t"])
@pytest.mark.parametrize("add", [None, "c", "b"])
def test_matches_numpy(rng, m, vectors, k, trans_a, add):
    n = vectors * LANES
    rows_b = max(k, m)  # B has at least m rows, so that its rows can serve as the addend
    entry = _compiled(m, n, k, trans_a, add)
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((rows_b, n)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32)
    a_m = a.T if trans_a else a
    expected = a_m.astype(np.float64) @ b[:k].astype(np.float64)
    if add == "c":
        expected += c
    elif add == "b":
        expected += b[:m]
    entry[1](a.ctypes.data, b.ctypes.data, c.ctypes.data)
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5 * np.sqrt(k))


def test_special_values_propagate(rng):
    entry = _compiled(8, LANES, 4, False, None)
    a = rng.standard_normal((8, 4)).astype(np.float32)
    b = rng.standard_normal((4, LANES)).astype(np.float32)
    a[2, 1], b[3, 5] = np.nan, np.inf
    c = np.empty((8, LANES), np.float32)
    entry[1](a.ctypes.data, b.ctypes.data, c.ctypes.data)
    with np.errstate(invalid="ignore"):
        expected = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(c), np.isnan(expected))
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(np.isinf(c), np.isinf(expected))
    np.testing.assert_allclose(c[finite], expected[finite], rtol=1e-5, atol=1e-5)


def test_declines_columns_that_are_not_whole_vectors():
    from llvmlite import ir

    from ember.backend.kernel.llvm.builder import KernelBuilder

    fn = ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), [ir.PointerType()] * 3), name="f")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    a, w, c = (Operand(p, LANES + 1) for p in fn.args)
    assert not small_gemm.applies(LANES + 1, LANES)
    assert not small_gemm.emit_gemm(KernelBuilder(b), 4, LANES + 1, 3, a, w, c, LANES)
    assert len(fn.blocks) == 1 and not fn.blocks[0].instructions  # nothing emitted


def _compiled_nt(m, n, k):
    def emit(parts):
        kb, (a, b_t, c) = parts
        assert small_gemm.emit_gemm_nt(kb, m, n, k, Operand(a, k), Operand(b_t, k), Operand(c, n), LANES)

    found = compile_entry(emit, f"test_small_gemm_nt_{m}_{n}_{k}")
    if found is None:
        pytest.skip("llvmlite cannot compile for this host")
    return found


@pytest.mark.parametrize("m,n,vectors", [(32, 128, 8), (13, 7, 2), (4, 4, 1), (3, 9, 3)])
def test_dot_form_matches_numpy(rng, m, n, vectors):
    """``A @ B^T`` from the rows of ``A`` and ``B^T``: full and partial tiles both ways."""
    k = vectors * LANES
    entry = _compiled_nt(m, n, k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b_t = rng.standard_normal((n, k)).astype(np.float32)
    c = np.empty((m, n), np.float32)
    entry[1](a.ctypes.data, b_t.ctypes.data, c.ctypes.data)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b_t.T.astype(np.float64), rtol=1e-5, atol=1e-5 * np.sqrt(k))


def test_dot_form_declines_partial_vectors():
    from llvmlite import ir

    from ember.backend.kernel.llvm.builder import KernelBuilder

    fn = ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), [ir.PointerType()] * 3), name="f")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    a, w, c = (Operand(p, LANES + 1) for p in fn.args)
    assert not small_gemm.emit_gemm_nt(KernelBuilder(b), 4, 4, LANES + 1, a, w, c, LANES)
    assert not fn.blocks[0].instructions


def _packed_entry(m, n, k, trans_b, add):
    """``C = A @ B (+ C)`` through ``emit_pack`` (of ``B``, or of ``B^T``'s storage read
    transposed) into the fourth pointer, then ``emit_gemm_packed``."""

    def emit(parts):
        kb, (a, b, c, packed) = parts
        source = Operand(b, 1, k) if trans_b else Operand(b, n)
        small_gemm.emit_pack(kb, k, n, source, packed, LANES)
        addend = Operand(c, n) if add else None
        small_gemm.emit_gemm_packed(kb, m, n, k, Operand(a, k), packed, Operand(c, n), LANES, addend)

    found = compile_entry(emit, f"test_small_gemm_packed_{m}_{n}_{k}_{int(trans_b)}_{int(add)}", pointers=4)
    if found is None:
        pytest.skip("llvmlite cannot compile for this host")
    return found


@pytest.mark.parametrize("m,panels,k", [(32, 16 // small_gemm.VECTORS, 128), (10, 1, 7), (9, 3, 600)])
@pytest.mark.parametrize("trans_b", [False, True], ids=["b", "b_t"])
@pytest.mark.parametrize("add", [False, True], ids=["set", "add"])
def test_packed_product_matches_numpy(rng, m, panels, k, trans_b, add):
    n = panels * small_gemm.panel(LANES)
    assert small_gemm.applies_packed(n, LANES) and not small_gemm.applies_packed(n + LANES, LANES)
    entry = _packed_entry(m, n, k, trans_b, add)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b_math = rng.standard_normal((k, n)).astype(np.float32)
    b = np.ascontiguousarray(b_math.T) if trans_b else b_math  # B^T's storage when trans_b
    c = rng.standard_normal((m, n)).astype(np.float32)
    expected = a.astype(np.float64) @ b_math.astype(np.float64) + (c if add else 0.0)
    packed = np.full(small_gemm.packed_floats(k, n), np.nan, np.float32)
    entry[1](a.ctypes.data, b.ctypes.data, c.ctypes.data, packed.ctypes.data)
    width = small_gemm.panel(LANES)
    layout = b_math.reshape(k, panels, width).transpose(1, 0, 2).ravel()  # panel j: its k rows in turn
    np.testing.assert_array_equal(packed, layout)
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5 * np.sqrt(k))
