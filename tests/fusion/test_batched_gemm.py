"""Batched products with a shared right operand (a linear layer over ``[batch, seq,
features]``) run as one ``?gemm`` over the stacked rows: values against numpy for
the layouts that fold and those that do not."""

from __future__ import annotations

import numpy as np
import pytest

from ember.backend.fusion.llvm import LLVMExecutor
from tests.fusion.oracle import FLOATS, Case, assert_same


@pytest.fixture(scope="module")
def executor():
    return LLVMExecutor(blas_threshold=0)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize(
    ("a_shape", "perm", "b_shape", "b_perm"),
    [
        ((2, 3, 4, 5), None, (5, 6), None),  # stacked rows: folds
        ((3, 1, 5), None, (5, 2), None),  # one row per batch
        ((4, 1, 5), None, (7, 5), (1, 0)),  # one row per batch, transposed B (a decode step's head): folds
        ((2, 4, 3, 5), (0, 2, 1, 3), (5, 6), None),  # rows of a permuted A: a loop of products
        ((2, 3, 5, 4), (0, 1, 3, 2), (5, 6), None),  # transposed A: a loop
        ((2, 3, 4, 5), None, (6, 5), (1, 0)),  # transposed shared B: folds
        ((2, 4, 5), None, (2, 5, 6), None),  # B per batch: a loop
    ],
)
def test_batched_products_match_numpy(executor, dtype, a_shape, perm, b_shape, b_perm, rng):
    a_np = rng.standard_normal(a_shape).astype(dtype)
    b_np = rng.standard_normal(b_shape).astype(dtype)
    case = Case()
    a, b = case.input(a_np), case.input(b_np)
    if perm is not None:
        a = case.ops.permute(a, perm)
        a_np = a_np.transpose(perm)
    if b_perm is not None:
        b = case.ops.permute(b, b_perm)
        b_np = b_np.transpose(b_perm)
    compiled, replayed, _ = case.run(executor, [case.ops.matmul(a, b)])
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert_same(compiled[0], replayed[0], "matmul", rtol=tol, atol=tol)
    np.testing.assert_allclose(compiled[0], np.matmul(a_np.astype(np.float64), b_np), rtol=tol, atol=tol)


@pytest.mark.parametrize("b_perm", [None, (1, 0)])
def test_one_row_per_batch_is_one_gemm_not_a_gemv_per_batch(executor, b_perm, rng, monkeypatch):
    """A decode step at batch 8 (``[8, 1, d] @ [d, n]``): one ``?gemm`` over the 8 rows,
    which reads B once, not 8 ``?gemv`` calls that read it 8 times (through BLAS: the
    IR names its ``cblas_sgemm``)."""
    from ember.backend.fusion.llvm.sgemm import GEMM_ENV

    monkeypatch.setenv(GEMM_ENV, "blas")
    a_np = rng.standard_normal((8, 1, 16)).astype(np.float32)
    b_np = rng.standard_normal((16, 24) if b_perm is None else (24, 16)).astype(np.float32)
    case = Case()
    a, b = case.input(a_np), case.input(b_np)
    if b_perm is not None:
        b = case.ops.permute(b, b_perm)
        b_np = b_np.T
    compiled, _, plan = case.run(executor, [case.ops.matmul(a, b)])
    np.testing.assert_allclose(compiled[0], np.matmul(a_np.astype(np.float64), b_np), rtol=1e-5, atol=1e-5)
    ir = str(plan.variants[-1].ir)
    gemms = [line for line in ir.splitlines() if "call void" in line and "cblas_sgemm" in line]
    assert len(gemms) == 1 and "i64 8, i64 24, i64 16" in gemms[0]  # M = 8 rows, N, K
    assert not any("call void" in line and "cblas_sgemv" in line for line in ir.splitlines())
