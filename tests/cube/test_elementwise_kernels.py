"""The elementwise generator's vec4 path: any expression tree over dense operands, with
uniform operands, index leaves and every dtype WGSL has vec4 words of; the scalar path
where it doesn't apply; and grids over the per-dimension workgroup limit."""

from __future__ import annotations

import numpy as np
import pytest

from ember.backend.cube import ir
from ember.backend.cube.kernels import elementwise
from ember.backend.dtype import DType
from ember.backend.ops import BinaryOp, UnaryOp


@pytest.fixture
def rng():
    return np.random.default_rng(5)


def _fused(ctype: str = "f32") -> ir.Expr:
    """``where(x0 > x1, exp(x0) * s0, x2 - index)``: three inputs, a scalar, the index."""
    x0, x1, x2 = (ir.load(i, ctype) for i in range(3))
    left = ir.binary(BinaryOp.MUL, ir.unary(UnaryOp.EXP, x0), ir.scalar(0, ctype))
    right = ir.binary(BinaryOp.SUB, x2, ir.convert(ir.index(), ctype))
    return ir.select(ir.binary(BinaryOp.GT, x0, x1), left, right)


def _fused_ref(x0, x1, x2, s0):
    index = np.arange(x0.size, dtype=np.float64).reshape(x0.shape)
    return np.where(x0 > x1, np.exp(x0) * s0, x2 - index)


@pytest.fixture
def launches(backend, monkeypatch):
    """The kernels launched while a test runs."""
    seen = []
    original = backend.runtime.launch3

    def hook(kernel, buffers, info, groups):
        seen.append((kernel, groups))
        original(kernel, buffers, info, groups)

    monkeypatch.setattr(backend.runtime, "launch3", hook)
    return seen


@pytest.mark.parametrize("shape", [(64,), (6, 10), (3, 5, 7), (1,), (4096,)])
def test_fused_tree_vec4_and_scalar(backend, rng, launches, shape):
    xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]
    out = elementwise.run(
        backend, _fused(), [backend.from_numpy(x) for x in xs], backend.storage(DType.FLOAT32), shape, [0.5], ["f32"]
    )
    np.testing.assert_allclose(backend.to_numpy(out), _fused_ref(*xs, 0.5), rtol=1e-5, atol=1e-5)
    quads = int(np.prod(shape)) % 4 == 0
    assert launches[-1][0].name.startswith("elementwise4_" if quads else "elementwise_")


def test_vec4_with_uniform_operand_and_offsets(backend, rng, launches):
    x = rng.standard_normal(40).astype(np.float32)
    big = backend.from_numpy(x)
    one = backend.from_numpy(np.array([3.0], np.float32))
    cases = {
        "aligned view": (backend.slice(big, [(4, 36, 1)]), True),  # offset 4: vec4 with its offset
        "unaligned view": (backend.slice(big, [(2, 34, 1)]), False),  # offset 2: scalar loads
    }
    for name, (view, vec) in cases.items():
        start = view.offset
        expr = ir.binary(BinaryOp.MUL, ir.load(0, "f32"), ir.load(1, "f32"))
        got = backend.to_numpy(
            elementwise.run(backend, expr, [view, backend.expand(one, (32,))], backend.storage(DType.FLOAT32), (32,))
        )
        np.testing.assert_allclose(got, x[start : start + 32] * 3.0, rtol=1e-6, err_msg=name)
        assert launches[-1][0].name.startswith("elementwise4_") == vec, name
        if vec:
            assert "array<vec4<f32>>" in launches[-1][0].source and "in1: array<f32>" in launches[-1][0].source


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32", "uint8", "bool", "int64"])
def test_vec4_dtypes(backend, rng, launches, dtype):
    import ml_dtypes  # noqa: F401  (bfloat16 for numpy)

    n = 64
    if dtype == "bool":
        x, y = rng.random(n) > 0.5, rng.random(n) > 0.5
        got = backend.to_numpy(backend.binary(BinaryOp.LOGICAL_XOR, backend.from_numpy(x), backend.from_numpy(y)))
        assert (got == (x != y)).all()
    elif dtype in ("int32", "uint8", "int64"):
        x = rng.integers(0, 200, n).astype(dtype)
        y = rng.integers(0, 200, n).astype(dtype)
        got = backend.to_numpy(backend.binary(BinaryOp.ADD, backend.from_numpy(x), backend.from_numpy(y)))
        want = x.astype(np.int64) + y
        assert (got.astype(np.int64) == (want % 256 if dtype == "uint8" else want)).all()
    else:
        x = rng.standard_normal(n).astype(dtype)
        got = backend.to_numpy(backend.unary(UnaryOp.SQUARE, backend.from_numpy(x)))
        want = (x.astype(np.float32) ** 2).astype(dtype)
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2)
    name = launches[-1][0].name
    assert name.startswith("elementwise_" if dtype == "int64" else "elementwise4_"), name  # int64: two words


def test_comparison_into_bool_words(backend, rng, launches):
    x = rng.standard_normal(32).astype(np.float32)
    got = backend.to_numpy(backend.binary(BinaryOp.LT, backend.from_numpy(x), 0.25))
    assert got.dtype == np.bool_ and (got == (x < 0.25)).all()
    assert "out0: array<vec4<u32>>" in launches[-1][0].source


def test_arange_and_fill_through_the_vec4_path(backend):
    out = backend.arange(3, 3 + 2 * 40, 2, DType.INT32)
    assert backend.to_numpy(out).tolist() == list(range(3, 83, 2))
    assert backend.to_numpy(backend.full((8, 4), 1.5, DType.FLOAT32)).tolist() == [[1.5] * 4] * 8


def test_slice_assign_into_a_dense_destination(backend, rng):
    base = backend.from_numpy(np.zeros((4, 8), np.float32))
    value = rng.standard_normal((4, 8)).astype(np.float32)
    out = backend.slice_assign(base, [(0, 4, 1), (0, 8, 1)], backend.from_numpy(value))
    np.testing.assert_array_equal(backend.to_numpy(out), value)


def test_grids_over_the_limit_waste_less_than_a_row(backend, rng, launches, monkeypatch):
    """A launch over more workgroups than one grid dim holds is spread over rows with
    fewer idle workgroups than rows, never a whole extra row of them."""
    monkeypatch.setattr(backend.runtime, "max_groups", 7)
    x = rng.standard_normal(256 * 4 * 30 + 8).astype(np.float32)  # 31 workgroups of quads
    got = backend.to_numpy(backend.unary(UnaryOp.NEG, backend.from_numpy(x)))
    np.testing.assert_array_equal(got, -x)
    kernel, (gx, gy, _) = launches[-1]
    needed = -(-x.size // 4 // 256)
    assert kernel.name.startswith("elementwise4_") and gx <= 7 and needed <= gx * gy < needed + gy
