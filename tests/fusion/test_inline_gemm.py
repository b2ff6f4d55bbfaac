"""Compiled float32 matrix products emitted inline (``ember.backend.kernel.llvm.small_gemm``:
``A @ B`` with dense ``B`` rows, ``A^T @ B``, and ``A @ B^T`` as dot products) and flex's
eager linear layer through the same loops (``ember.backend.flex.native_gemm``), against
float64 numpy; and ``EMBER_GEMM=blas`` keeping BLAS with the same values."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import Device, Tensor
from ember.backend.flex import native_gemm
from ember.backend.kernel.llvm import small_gemm

M, K, N = 40, 64, 48  # 40 rows: whole register tiles and a partial one; k and n whole vectors


def _arrays(rng):
    return (
        rng.standard_normal((M, K)).astype(np.float32),
        rng.standard_normal((K, N)).astype(np.float32),
        rng.standard_normal((M, N)).astype(np.float32),
    )


def _products(x, w, g):
    """The three products of a linear layer: forward, input gradient, weight gradient."""
    return x.matmul(w), g.matmul(w.transpose()), x.transpose().matmul(g)


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "blas"])
def test_compiled_products_match_numpy(rng, inline, monkeypatch):
    if not inline:
        monkeypatch.setenv(small_gemm.INLINE_ENV, "blas")
    emitted = []
    spied = (("emit_shared_gemm", small_gemm.emit_shared_gemm), ("emit_gemm_nt", small_gemm.emit_gemm_nt))
    for name, real in spied:

        def spy(*args, real=real, name=name):
            emitted.append(name)
            return real(*args)

        monkeypatch.setattr(small_gemm, name, spy)
    arrays = _arrays(rng)
    device = Device.flex()
    tensors = [Tensor.from_data(a, device=device) for a in arrays]
    compiled = ember.compile(_products)
    compiled(*tensors)  # the first call replays; the plan compiles for the next
    ours = compiled(*tensors)
    # x^T g inline, g w^T as dot products (x w may run ember's own product: an inference plan)
    assert set(emitted) == ({"emit_shared_gemm", "emit_gemm_nt"} if inline else set())
    x, w, g = (a.astype(np.float64) for a in arrays)
    for got, ref in zip(ours, (x @ w, g @ w.T, x.T @ g)):
        np.testing.assert_allclose(got.to_numpy(), ref, rtol=1e-5, atol=1e-4)


def test_flex_linear_inline_matches_numpy(rng, monkeypatch):
    monkeypatch.setattr(native_gemm, "MIN_WORK", 0)
    calls = []
    real = native_gemm.matmul

    def spy(*args):
        out = real(*args)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(native_gemm, "matmul", spy)
    x, w, g = _arrays(rng)
    bias = rng.standard_normal(N).astype(np.float32)
    flex = Device.flex().backend
    out = flex.linear(x, w, bias)
    gx, gw, gb = flex.linear_backward(x, w, g, True, True, True)
    assert calls == [True, True, True]  # forward, input gradient, weight gradient inline
    x64, w64, g64 = (a.astype(np.float64) for a in (x, w, g))
    np.testing.assert_allclose(out, x64 @ w64 + bias, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(gx, g64 @ w64.T, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(gw, x64.T @ g64, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(gb, g64.sum(0), rtol=1e-5, atol=1e-4)


def test_flex_keeps_a_multi_threaded_blas(rng, monkeypatch):
    """With BLAS on several threads (``EMBER_NUM_THREADS``) flex keeps numpy's product:
    the inline loops run on one core."""
    from dataclasses import replace

    from ember.backend.flex import blas

    loaded = blas.load()
    if loaded is None:
        pytest.skip("no OpenBLAS found")
    monkeypatch.setattr(native_gemm, "MIN_WORK", 0)
    x, w, _ = _arrays(rng)
    assert native_gemm.matmul(x, w) is not None
    monkeypatch.setattr(blas, "load", lambda: replace(loaded, threads=2))
    assert native_gemm.matmul(x, w) is None


@pytest.mark.parametrize("rows", [M, 96], ids=["dots", "repacked"])
def test_input_gradient_forms_match_numpy(rng, rows, monkeypatch):
    """``g w^T``: dot products of rows for few rows, else ``w^T`` packed from ``w``'s
    storage into the plan's buffer and the plain register tiles (sgemm.emit_repacked)."""
    from ember.backend.fusion.llvm import sgemm

    emitted = []
    for name in ("emit_gemm_nt", "emit_pack", "emit_gemm_packed"):
        real = getattr(small_gemm, name)

        def spy(*args, real=real, name=name):
            emitted.append(name)
            return real(*args)

        monkeypatch.setattr(small_gemm, name, spy)
    g = rng.standard_normal((rows, N)).astype(np.float32)
    w = rng.standard_normal((K, N)).astype(np.float32)  # K output columns: whole panels
    device = Device.flex()
    compiled = ember.compile(lambda g, w: g.matmul(w.transpose()))
    args = [Tensor.from_data(a, device=device) for a in (g, w)]
    compiled(*args)  # the first call replays; the plan compiles for the next
    got = compiled(*args).to_numpy()
    repacked = rows >= sgemm.REPACK_ROWS
    assert set(emitted) == ({"emit_pack", "emit_gemm_packed"} if repacked else {"emit_gemm_nt"})
    np.testing.assert_allclose(got, g.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-5, atol=1e-4)


def test_input_gradient_that_eager_runs_inline_is_transposed_and_shared(rng, monkeypatch):
    """``g w^T`` with few rows that flex's eager product runs (``native_gemm.MIN_WORK``
    multiply-adds, here 32x512x64): the plan copies ``w^T`` into dense rows and calls the
    shared product flex's eager ``linear_backward`` calls on numpy's transposed copy
    (sgemm.emit_transposed), no dot products of its own: the two are bit-identical."""
    from ember.backend.fusion.llvm import sgemm

    emitted = []
    for name in ("emit_gemm_nt", "emit_shared_gemm"):
        real = getattr(small_gemm, name)

        def spy(*args, real=real, name=name):
            emitted.append(name)
            return real(*args)

        monkeypatch.setattr(small_gemm, name, spy)
    rows, inner, cols = 32, 64, 512
    assert rows * inner * cols >= native_gemm.MIN_WORK and rows < sgemm.REPACK_ROWS
    g = rng.standard_normal((rows, inner)).astype(np.float32)
    w = rng.standard_normal((cols, inner)).astype(np.float32)
    device = Device.flex()
    args = [Tensor.from_data(a, device=device) for a in (g, w)]
    eager = native_gemm.matmul(g, w.T)  # what flex's linear_backward runs for the input gradient
    assert eager is not None
    compiled = ember.compile(lambda g, w: g.matmul(w.transpose()))
    compiled(*args)  # the first call replays; the plan compiles for the next
    got = compiled(*args).to_numpy()
    assert set(emitted) == {"emit_shared_gemm"}
    np.testing.assert_allclose(got, g.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(got, eager)


def test_linear_with_bias_is_one_library_step_in_a_training_plan(rng):
    """``linear`` with a bias in a training plan: one library step (the inline product,
    the bias its addend: fusion/llvm/linear.py), its value and gradients against float64."""
    from ember.backend.fusion.steps import Library
    from ember.tensor.layer_ops import linear

    x = rng.standard_normal((5, 8, K)).astype(np.float32)  # 40 rows over two leading dims
    w = rng.standard_normal((K, N)).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    g = rng.standard_normal((5, 8, N)).astype(np.float32)
    device = Device.flex().autodiff()

    def step(x, w, b, g):
        x, w, b = x.require_grad(), w.require_grad(), b.require_grad()
        y = linear(x, w, b)
        grads = y.mul(g).sum().backward()
        return y, x.grad(grads), w.grad(grads), b.grad(grads)

    compiled = ember.compile(step)
    args = [Tensor.from_data(a, device=device) for a in (x, w, b, g)]
    compiled(*args)  # the first call replays; the plan compiles for the next
    ours = [t.to_numpy() for t in compiled(*args)]
    plan = next(iter(compiled._entries.values())).plan
    ops = [s.node.op for s in plan.schedule.steps if isinstance(s, Library)]
    assert ops == ["linear"]
    x64, w64, g64 = (a.astype(np.float64) for a in (x, w, g))
    expected = [x64 @ w64 + b, g64 @ w64.T, x64.reshape(-1, K).T @ g64.reshape(-1, N), g64.sum((0, 1))]
    for got, ref in zip(ours, expected):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)


def test_flex_inline_product_writes_into_out(rng, monkeypatch):
    """``out=``: the product written into the given C-contiguous block (a strided ``a``, ``b``
    a column block of a wider matrix), against float64; a block of another shape, dtype or
    layout is declined (``None``, ``out`` untouched)."""
    monkeypatch.setattr(native_gemm, "MIN_WORK", 0)
    a = rng.standard_normal((32, 160)).astype(np.float32)[:, :144]
    b = rng.standard_normal((144, 4096)).astype(np.float32)[:, 1024:2048]
    y = np.full((3, 32, 1024), 5.0, np.float32)
    got = native_gemm.matmul(a, b, out=y[1])
    if got is None:
        pytest.skip("the inline product does not apply on this host")
    assert np.shares_memory(got, y[1])
    np.testing.assert_allclose(y[1], a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)
    assert (y[0] == 5.0).all() and (y[2] == 5.0).all()
    for bad in (np.empty((32, 1023), np.float32), np.empty((32, 1024), np.float64), np.empty((1024, 32), np.float32).T):
        assert native_gemm.matmul(a, b, out=bad) is None
