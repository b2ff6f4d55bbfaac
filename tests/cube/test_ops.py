"""Cube kernels against numpy in float64, on the code paths the conformance suite's
small shapes do not reach: strided and broadcast operands, long reductions split
over workgroups, tiled scans, bitonic sorts, matmul tiles and edges, fused ops."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Tensor
from ember.tensor import activation as A
from tests.conftest import assert_close

# Binary ops with broadcasting run on cube in the conformance suite
# (tests/tensor/test_elementwise.py::test_binary_broadcasting).


@pytest.fixture
def rng():
    return np.random.default_rng(7)


VIEWS = {
    "transpose": lambda t: t.transpose(),
    "flip": lambda t: t.flip([0, 1]),
    "step_slice": lambda t: t.slice([(1, None, 2), (None, None, -1)]),
    "expand": lambda t: t.slice([(0, 1)]).expand([5, 6]),
    "permute3": lambda t: t.reshape([5, 2, 3]).permute([2, 0, 1]),
}


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_strided_operands(gpu, rng, view):
    x = rng.uniform(0.5, 2, size=(5, 6)).astype(np.float32)
    t, v = Tensor.from_data(x, device=gpu), VIEWS[view]
    ref = v(Tensor.from_data(x.astype(np.float64), device=__import__("ember").Device.flex())).to_numpy()
    assert v(t).to_numpy().tolist() == ref.astype(np.float32).tolist()
    assert_close(v(t).log().mul(v(t)), np.log(ref) * ref, rtol=1e-5)
    assert_close(v(t).sum_dim(0), ref.sum(0, keepdims=True), rtol=1e-5)
    assert_close(v(t).cumsum(-1), np.cumsum(ref, -1), rtol=1e-5)
    assert_close(v(t).matmul(v(t).transpose()), ref @ np.swapaxes(ref, -1, -2), rtol=1e-5)
    assert v(t).argsort(-1).tolist() == np.argsort(ref, -1, kind="stable").tolist()
    assert_close(v(t).reshape([-1]), ref.reshape(-1))
    region = Tensor.zeros([7, 8, 4], device=gpu).slice_assign(
        [(1, 1 + ref.shape[0]), (2, 2 + ref.shape[1])], v(t).reshape(ref.shape[:2] + (-1,)).slice([None, None, (0, 1)])
    )
    expected = np.zeros((7, 8, 4))
    expected[1 : 1 + ref.shape[0], 2 : 2 + ref.shape[1], :] = ref.reshape(ref.shape[:2] + (-1,))[:, :, :1]  # broadcast
    assert_close(region, expected)


@pytest.mark.parametrize("op", ["sum", "mean", "prod", "max", "min"])
@pytest.mark.parametrize(
    "shape,dim",
    [
        ((100_003,), 0),
        ((3, 20_000), 1),
        ((9000, 3), 0),
        ((40, 300), 1),
        ((300, 40), 0),
        ((9000, 70), 1),
        ((70, 9000), 0),
    ],
)
def test_reductions_on_every_path(gpu, rng, op, shape, dim):
    x = (
        rng.uniform(0.9, 1.1, size=shape).astype(np.float32)
        if op == "prod"
        else rng.standard_normal(shape).astype(np.float32)
    )
    out = getattr(Tensor.from_data(x, device=gpu), f"{op}_dim")(dim)
    expected = {"sum": np.sum, "mean": np.mean, "prod": np.prod, "max": np.max, "min": np.min}[op](
        x.astype(np.float64), axis=dim, keepdims=True
    )
    assert_close(out, expected, rtol=2e-4 if op == "prod" else 1e-4, atol=1e-3)


def test_reductions_propagate_nan_and_handle_ints(gpu):
    x = np.ones(20_000, np.float32)
    x[12_345] = np.nan
    t = Tensor.from_data(x, device=gpu)
    assert np.isnan(t.max().into_scalar()) and np.isnan(t.sum().into_scalar())
    assert t.argmax(0).tolist() == [12_345] and t.argmin(0).tolist() == [12_345]
    i = np.arange(30_000, dtype=np.int64) % 7 - 3
    ti = Tensor.from_data(i, device=gpu)
    assert ti.sum().tolist() == [int(i.sum())] and ti.max().tolist() == [3]
    assert Tensor.from_data(i > 2, device=gpu).any().tolist() == [True]
    assert Tensor.from_data(i > -4, device=gpu).all().tolist() == [True]


@pytest.mark.parametrize("shape,dim", [((5, 1000), 1), ((1000, 5), 0), ((3, 7), 1)])
def test_argmax_first_index_on_ties(gpu, rng, shape, dim):
    x = rng.integers(0, 4, size=shape).astype(np.float32)
    t = Tensor.from_data(x, device=gpu)
    assert t.argmax(dim).to_numpy().tolist() == np.argmax(x, dim, keepdims=True).tolist()
    assert t.argmin(dim).to_numpy().tolist() == np.argmin(x, dim, keepdims=True).tolist()


@pytest.mark.parametrize("op", ["cumsum", "cumprod", "cummax", "cummin"])
@pytest.mark.parametrize("shape,dim", [((3, 1000), 1), ((700, 2), 0), ((300, 20), 1)])
def test_scans_on_every_path(gpu, rng, op, shape, dim):
    x = (
        rng.uniform(0.995, 1.005, size=shape).astype(np.float32)
        if op == "cumprod"
        else rng.standard_normal(shape).astype(np.float32)
    )
    out = getattr(Tensor.from_data(x, device=gpu), op)(dim)
    fn = {"cumsum": np.cumsum, "cumprod": np.cumprod, "cummax": np.maximum.accumulate, "cummin": np.minimum.accumulate}[
        op
    ]
    assert_close(out, fn(x.astype(np.float64), axis=dim), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [5, 300, 3000])
@pytest.mark.parametrize("descending", [False, True])
def test_argsort_stable_with_nan(gpu, rng, n, descending):
    x = rng.integers(0, 10, size=(3, n)).astype(np.float32)
    x[0, ::7] = np.nan
    out = Tensor.from_data(x, device=gpu).argsort(1, descending=descending).to_numpy()
    flex = Tensor.from_data(x, device=__import__("ember").Device.flex()).argsort(1, descending=descending).to_numpy()
    assert out.tolist() == flex.tolist()
    ints = rng.integers(-5, 5, size=(n, 2))
    assert Tensor.from_data(ints, device=gpu).argsort(0).tolist() == np.argsort(ints, 0, kind="stable").tolist()


def test_indexing_ops(gpu, rng):
    x = rng.standard_normal((6, 5)).astype(np.float32)
    t = Tensor.from_data(x, device=gpu)
    idx = rng.integers(0, 6, size=(9, 5))
    assert_close(t.gather(0, idx), np.take_along_axis(x, idx, 0))
    expected = x.copy()
    np.add.at(expected, (idx[:6], np.arange(5)[None, :]), x[:6] * 2)
    assert_close(t.scatter(0, Tensor.from_data(idx[:6], device=gpu), t.mul_scalar(2.0)), expected, rtol=1e-5)
    sel = np.array([5, 0, 5, 2])
    assert_close(t.transpose().select(1, sel), x.T[:, sel])
    cols = np.array([4, 0, 4, 2])
    added = x.copy()
    np.add.at(added, (slice(None), cols), np.ones((6, 4)))
    assert_close(t.select_assign(1, cols, Tensor.ones([6, 4], device=gpu)), added, rtol=1e-6)
    mask = x > 0.5
    assert Tensor.from_data(mask, device=gpu).argwhere().tolist() == np.argwhere(mask).tolist()
    big = rng.random(5000) > 0.7
    assert Tensor.from_data(big, device=gpu).argwhere().tolist() == np.argwhere(big).tolist()


@pytest.mark.parametrize(
    ("sa", "sb"),
    [
        ((1, 1), (1, 1)),
        ((65, 17), (17, 130)),
        ((2, 3, 70, 33), (33, 5)),
        ((4, 1, 6, 8), (3, 8, 2)),
        ((129, 1), (1, 64)),
    ],
    ids=str,
)
def test_matmul_tiles_edges_and_batches(gpu, rng, sa, sb):
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    out = Tensor.from_data(a, device=gpu).matmul(Tensor.from_data(b, device=gpu))
    assert_close(out, np.matmul(a.astype(np.float64), b.astype(np.float64)), rtol=1e-4, atol=1e-4)


def test_matmul_transposed_int_and_linear(gpu, rng):
    a = rng.standard_normal((40, 30)).astype(np.float32)
    ta = Tensor.from_data(a, device=gpu)
    assert_close(ta.transpose().matmul(ta), a.T.astype(np.float64) @ a, rtol=1e-4, atol=1e-4)
    i = rng.integers(-9, 9, size=(5, 7))
    ti = Tensor.from_data(i, device=gpu)
    assert ti.matmul(ti.transpose()).tolist() == (i @ i.T).tolist()
    w = rng.standard_normal((30, 3)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    backend = gpu.backend
    out = backend.linear(
        ta.primitive, Tensor.from_data(w, device=gpu).primitive, Tensor.from_data(bias, device=gpu).primitive
    )
    assert_close(backend.to_numpy(out), a.astype(np.float64) @ w + bias, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape,dim", [((3, 500), 1), ((500, 3), 0), ((4, 5, 6), 1)])
def test_fused_softmax(gpu, rng, shape, dim):
    x = rng.standard_normal(shape) * 10
    t = Tensor.from_data(x.astype(np.float32), device=gpu)
    x = x.astype(np.float32).astype(np.float64)
    shifted = x - x.max(dim, keepdims=True)
    expected = np.exp(shifted) / np.exp(shifted).sum(dim, keepdims=True)
    assert_close(A.softmax(t, dim), expected, rtol=1e-5, atol=1e-7)
    assert_close(A.log_softmax(t, dim), np.log(expected), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "options",
    [
        {"weight_decay": 0.01},
        {"weight_decay": 0.01, "decoupled": True, "amsgrad": True},
        {"weight_decay": 0.01, "amsgrad": True},
    ],
)
def test_fused_adam_matches_the_composite(gpu, rng, options):
    """The WGSL kernel against ``ember.optim.adam``'s composite on the same device, three
    steps over two tensors (f32; the GPU may contract a * b + c, so not bit for bit)."""
    from tests.optim.test_adam_kernels import _kernel_and_composite

    for kernel, composite in _kernel_and_composite(gpu, [(7, 3), (40,)], options, rng):
        assert (kernel[3] is None) == (composite[3] is None) == (not options.get("amsgrad"))
        for k_column, c_column in zip(kernel, composite):
            for k, c in zip(k_column or [], c_column or []):
                assert_close(k, c, rtol=1e-6, atol=1e-9)


def test_fused_mse_loss(gpu, rng):
    from ember.nn.loss import MseLoss, Reduction

    a = rng.standard_normal((50, 3)).astype(np.float32)
    b = rng.standard_normal((50, 3)).astype(np.float32)
    ta, tb = Tensor.from_data(a, device=gpu), Tensor.from_data(b, device=gpu)
    d = a.astype(np.float64) - b
    assert_close(MseLoss().forward(ta, tb, Reduction.MEAN), [np.mean(d * d)], rtol=1e-5)
    assert_close(MseLoss().forward(ta, tb, Reduction.SUM), [np.sum(d * d)], rtol=1e-5)


@pytest.mark.parametrize("n", [40, 3000])
def test_select_add_many_repeated_indices(gpu, rng, n):
    """Embedding-backward shapes: more indices than rows, sorted first past 64."""
    x = rng.standard_normal((50, 6)).astype(np.float32)
    idx = rng.integers(0, 50, size=n)
    values = rng.standard_normal((n, 6)).astype(np.float32)
    expected = x.astype(np.float64)
    np.add.at(expected, idx, values)
    out = Tensor.from_data(x, device=gpu).select_assign(0, idx, Tensor.from_data(values, device=gpu))
    assert_close(out, expected, rtol=1e-4, atol=1e-4)
    t = Tensor.from_data(x.T.copy(), device=gpu)
    expected_t = x.T.astype(np.float64).copy()
    np.add.at(expected_t, (slice(None), idx), values.T)
    assert_close(
        t.select_assign(1, idx, Tensor.from_data(values.T.copy(), device=gpu)), expected_t, rtol=1e-4, atol=1e-4
    )
