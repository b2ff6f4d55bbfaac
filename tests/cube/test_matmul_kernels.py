"""The matmul templates (tiled 128x64 / 64x64, register-blocked) against numpy in
float64: every operand access mode, edges, batches, dtypes, epilogues, and the launch
split over the grid limit."""

from __future__ import annotations

import numpy as np
import pytest

from ember.backend.cube import ir
from ember.backend.cube.kernels import gemm_small, gemm_tiled
from ember.backend.cube.kernels import matmul as mm
from ember.backend.dtype import DType
from ember.backend.ops import BinaryOp


@pytest.fixture
def rng():
    return np.random.default_rng(11)


def _upload(backend, x: np.ndarray, transposed: bool):
    """``x`` on the GPU, stored transposed (a strided view) when asked."""
    if not transposed:
        return backend.from_numpy(x)
    t = backend.from_numpy(np.ascontiguousarray(np.swapaxes(x, -1, -2)))
    axes = tuple(range(t.ndim - 2)) + (t.ndim - 1, t.ndim - 2)
    return backend.permute(t, axes)


def _check(got, want, tol=1e-5):
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    assert got.shape == want.shape
    assert float(np.max(np.abs(got - want), initial=0.0)) <= tol * scale


# Shapes that select each template (see matmul.choose), with edges in M, N and K.
SHAPES = {
    "large": (260, 70, 132),  # 128x64 tile, 8x4 per invocation; ragged M, N, K
    "medium": (100, 44, 72),  # 64x64 tile, 4x4
    "small_k": (40, 9, 30),  # register-blocked, K < 32
    "small_m": (16, 144, 52),  # register-blocked, M <= 32
    "narrow": (70, 40, 10),  # register-blocked, N <= 16
    "tiny": (1, 1, 1),
    "row": (1, 64, 96),
    "column": (96, 64, 1),
}


PLANS = {
    "large": lambda m, n: mm.LARGE,
    "medium": lambda m, n: mm.MEDIUM,
    "regs": mm.registers,
}


def test_shapes_pick_the_templates():
    assert mm.choose(1024, 1024, 1024, 1) == mm.LARGE  # (m, n, k, batch)
    assert mm.choose(512, 512, 512, 1) == mm.LARGE
    assert mm.choose(512, 256, 512, 1) == mm.MEDIUM  # 128x64 tiles would be 16 workgroups
    assert mm.choose(128, 256, 784, 8) == mm.LARGE
    assert isinstance(mm.choose(128, 256, 784, 1), gemm_small.Blocking)  # 8 tiles of 64x64
    assert isinstance(mm.choose(64, 64, 64, 1), gemm_small.Blocking)  # too few tiles of either size
    for small in [(16, 784, 9, 64), (32, 196, 144, 64), (128, 10, 256, 1), (784, 784, 9, 1)]:
        assert isinstance(mm.choose(*small), gemm_small.Blocking)
    assert mm.registers(128, 10).wx == 4  # narrow outputs: few column quads per workgroup
    assert mm.registers(16, 784) == gemm_small.Blocking(4, 64)
    assert isinstance(mm.choose(1024, 1024, 1024, 1, cpu=True), gemm_small.Blocking)


@pytest.mark.parametrize("ta", [False, True], ids=["a", "aT"])
@pytest.mark.parametrize("tb", [False, True], ids=["b", "bT"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("plan", sorted(PLANS))
def test_float32_every_access_mode(backend, rng, plan, shape, ta, tb):
    m, k, n = SHAPES[shape]
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    ga, gb = _upload(backend, a, ta), _upload(backend, b, tb)
    got = backend.to_numpy(mm.matmul(backend, ga, gb, plan=PLANS[plan](m, n)))
    _check(got, a.astype(np.float64) @ b)


def test_default_choice(backend, rng):
    a = rng.standard_normal((130, 40)).astype(np.float32)
    b = rng.standard_normal((40, 70)).astype(np.float32)
    _check(backend.to_numpy(backend.matmul(backend.from_numpy(a), backend.from_numpy(b))), a.astype(np.float64) @ b)


def test_vectorised_and_scalar_modes_are_generated(backend):
    """Contiguous operands bind as vec4 arrays; an offset view that breaks 16-byte
    alignment falls back to scalar loads; accumulators are named vec4s updated by fma."""
    f32 = backend.storage(DType.FLOAT32)
    src = gemm_tiled.source(mm.LARGE, f32, "k", f32, "o", f32, True, "f32", None).source
    assert "var<storage, read> in0: array<vec4<f32>>" in src and "array<f32, 16>" not in src
    assert "acc7 = fma(" in src and "for (var kk" not in src  # unrolled at generation time
    small = gemm_small.source(gemm_small.Blocking(4, 16), f32, "s", f32, "k", f32, False, "f32", None).source
    assert "workgroupBarrier" not in small and "var<workgroup>" not in small
    assert "var<storage, read> in0: array<f32>" in small and "in1: array<vec4<f32>>" in small


def test_unaligned_offsets_use_scalar_loads(backend, rng):
    x = rng.standard_normal((70, 65)).astype(np.float32)
    t = backend.from_numpy(x)
    a = backend.slice(t, [(1, 69, 1), (1, 65, 1)])  # offset 66, row stride 65: no vec4
    b = backend.slice(t, [(3, 67, 1), (0, 64, 1)])
    got = backend.to_numpy(backend.matmul(a, b))
    _check(got, x[1:69, 1:65].astype(np.float64) @ x[3:67, 0:64])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32", "int64", "uint8"])
@pytest.mark.parametrize("plan", sorted(PLANS))
def test_other_dtypes(backend, rng, dtype, plan):
    m, k, n = SHAPES["large"]
    force = PLANS[plan](m, n)
    if dtype in ("int32", "int64", "uint8"):
        a = rng.integers(0, 5, (m, k)).astype(dtype)
        b = rng.integers(0, 5, (k, n)).astype(dtype)
        want = a.astype(np.int64) @ b.astype(np.int64)
        if dtype == "uint8":
            want = want % 256
        got = backend.to_numpy(mm.matmul(backend, backend.from_numpy(a), _upload(backend, b, True), plan=force))
        assert got.dtype == np.dtype(dtype) and (got.astype(np.int64) == want).all()
        return
    import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy)

    a = rng.standard_normal((m, k)).astype(np.float32).astype(dtype)
    b = rng.standard_normal((k, n)).astype(np.float32).astype(dtype)
    got = backend.to_numpy(mm.matmul(backend, backend.from_numpy(a), backend.from_numpy(b), plan=force))
    assert got.dtype == a.dtype
    _check(got.astype(np.float64), a.astype(np.float64) @ b.astype(np.float64), tol=2e-2)


def test_int64_beyond_32_bits(backend):
    a = np.array([[2**40, 3], [-(2**35), 1]], np.int64)
    b = np.array([[3, 1], [5, -(2**33)]], np.int64)
    assert backend.to_numpy(backend.matmul(backend.from_numpy(a), backend.from_numpy(b))).tolist() == (a @ b).tolist()


@pytest.mark.parametrize("plan", sorted(PLANS))
@pytest.mark.parametrize("shape", ["large", "small_k", "narrow"])
def test_broadcast_batches(backend, rng, shape, plan):
    m, k, n = SHAPES[shape]
    a = rng.standard_normal((3, 1, m, k)).astype(np.float32)
    b = rng.standard_normal((1, 2, k, n)).astype(np.float32)
    got = backend.to_numpy(mm.matmul(backend, backend.from_numpy(a), _upload(backend, b, True), plan=PLANS[plan](m, n)))
    _check(got, a.astype(np.float64) @ b)


@pytest.mark.parametrize("plan", sorted(PLANS))
@pytest.mark.parametrize("shape", ["large", "narrow"])
def test_epilogue_bias_activation_residual(backend, rng, shape, plan):
    m, k, n = SHAPES[shape]
    force = PLANS[plan](m, n)
    a = rng.standard_normal((2, m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    res = rng.standard_normal((2, m, 1)).astype(np.float32)  # broadcast along the columns
    ga, gb = backend.from_numpy(a), backend.from_numpy(b)
    gbias, gres = backend.from_numpy(bias), backend.from_numpy(res)
    want = a.astype(np.float64) @ b
    _check(backend.to_numpy(mm.matmul(backend, ga, gb, bias=gbias, plan=force)), want + bias)
    relu = mm.bias_epilogue(gbias, "f32", "relu")
    _check(backend.to_numpy(mm.matmul(backend, ga, gb, epilogue=relu, plan=force)), np.maximum(want + bias, 0))
    f = ir.load
    expr = ir.binary(BinaryOp.ADD, ir.binary(BinaryOp.MUL, f(0, "f32"), ir.scalar(0, "f32")), f(1, "f32"))
    scaled = mm.Epilogue(expr, (gres,), (0.5,), ("f32",))
    _check(backend.to_numpy(mm.matmul(backend, ga, gb, epilogue=scaled, plan=force)), 0.5 * want + res)
    cmp = mm.Epilogue(ir.binary(BinaryOp.GT, f(0, "f32"), f(1, "f32")), (gbias,))
    got = backend.to_numpy(
        mm.matmul(backend, ga, gb, epilogue=cmp, out_storage=backend.storage(DType.BOOL), plan=force)
    )
    assert got.dtype == np.bool_ and (got == ((a @ b) > bias)).mean() > 0.999  # ties at rounding aside


def test_epilogue_operand_must_broadcast(backend):
    from ember.errors import ShapeError

    a = backend.from_numpy(np.ones((4, 5), np.float32))
    b = backend.from_numpy(np.ones((5, 6), np.float32))
    with pytest.raises(ShapeError, match="does not broadcast"):
        mm.matmul(backend, a, b, bias=backend.from_numpy(np.ones(7, np.float32)))


def test_grids_over_the_per_dimension_limit_are_split(backend, rng, monkeypatch):
    """Tiles and batches beyond the per-dimension workgroup limit go in several launches."""
    monkeypatch.setattr(backend.runtime, "max_groups", 2)
    for m, k, n, plan in [
        (300, 40, 200, mm.LARGE),
        (20, 8, 50, mm.registers(20, 50)),
        (33, 8, 300, mm.registers(4, 300)),
    ]:
        a = rng.standard_normal((5, m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        before = backend.stats()["launches"]
        got = backend.to_numpy(mm.matmul(backend, backend.from_numpy(a), backend.from_numpy(b), plan=plan))
        assert backend.stats()["launches"] - before > 1
        _check(got, a.astype(np.float64) @ b)
