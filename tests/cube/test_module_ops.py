"""Cube's conv (im2col gathered in a matmul's loads, or materialised), conv-transpose
(col2im), pooling and embedding kernels against PyTorch, on the module-op suite's
awkward shapes."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.backend.module_ops import ModuleOps, conv_transpose_output_size
from tests.backend.test_module_ops import CONV_CASES, CONV_T_CASES, POOL_CASES, conv_transpose_with_bias_case
from tests.conftest import assert_close, import_torch

pytestmark = pytest.mark.torch
TOL = {"rtol": 1e-4, "atol": 1e-4}


class Cube:
    """The cube backend called with float64 numpy arrays (run in float32)."""

    def __init__(self, backend):
        self.b = backend

    def _in(self, a):
        if isinstance(a, np.ndarray):
            a = a.astype(np.float32) if a.dtype == np.float64 else a
            return self.b.from_numpy(a)
        return a

    def __getattr__(self, name):
        method = getattr(self.b, name)

        def call(*args):
            out = method(*(self._in(a) for a in args))
            if isinstance(out, tuple):
                return tuple(self.b.to_numpy(o) for o in out)
            return self.b.to_numpy(out)

        return call


@pytest.fixture(params=["fused", "im2col"])
def cube(request, backend, monkeypatch):
    """The backend with convs through the GEMM that gathers im2col in its loads, or
    (``im2col``) through materialised columns and a matmul with a bias epilogue."""
    if request.param == "im2col":
        from ember.backend.cube.kernels import conv_gemm

        monkeypatch.setattr(conv_gemm, "conv", lambda *args: None)
    return Cube(backend)


def _flex_default(backend, name, *args):
    return getattr(ModuleOps, name)(backend, *args)


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[2]}k{c[4]}s{c[5]}g{c[8]}")
def test_conv_weight_grad_and_transpose(cube, case):
    torch = import_torch()
    n, c, spatial, o, kernel, stride, padding, dilation, groups = case
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c) + spatial)
    w = rng.standard_normal((o, c // groups) + kernel)
    bias = rng.standard_normal(o)
    xt, wt = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    flat = [p for pair in reversed(padding) for p in pair]
    fn = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d, 3: torch.nn.functional.conv3d}[len(stride)]
    ref = fn(torch.nn.functional.pad(xt, flat), wt, torch.from_numpy(bias), stride, 0, dilation, groups)
    assert_close(cube.conv(x, w, bias, stride, padding, dilation, groups), ref.detach().numpy(), **TOL)
    g = rng.standard_normal(ref.shape)
    gx, gw = torch.autograd.grad(ref, (xt, wt), torch.from_numpy(g))
    assert_close(cube.conv_weight_grad(x, g, w.shape, stride, padding, dilation, groups), gw.numpy(), **TOL)
    output_padding = tuple(
        size - conv_transpose_output_size(out, k, s, p, 0, d)
        for size, out, k, s, p, d in zip(spatial, g.shape[2:], kernel, stride, padding, dilation)
    )
    assert_close(cube.conv_transpose(g, w, None, stride, padding, output_padding, dilation, groups), gx.numpy(), **TOL)


@pytest.mark.parametrize("case", CONV_T_CASES, ids=lambda c: f"{c[2]}k{c[4]}s{c[5]}g{c[9]}")
def test_conv_transpose_with_bias(cube, case):
    args, expected = conv_transpose_with_bias_case(case)
    assert_close(cube.conv_transpose(*args), expected, **TOL)


@pytest.mark.parametrize("case", POOL_CASES, ids=str)
def test_max_pool_indices_and_backward(cube, case):
    torch = import_torch()
    spatial, kernel, stride, padding, dilation, ceil_mode = case
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3) + spatial).astype(np.float32).astype(np.float64)
    fn = torch.nn.functional.max_pool1d if len(spatial) == 1 else torch.nn.functional.max_pool2d
    xt = torch.from_numpy(x).requires_grad_()
    ref, ref_idx = fn(xt, kernel, stride, padding, dilation, ceil_mode=ceil_mode, return_indices=True)
    pairs = tuple((p, p) for p in padding)
    b = cube.b
    y, idx = b.max_pool_with_indices(b.from_numpy(x.astype(np.float32)), kernel, stride, pairs, dilation, ceil_mode)
    assert_close(b.to_numpy(y), ref.detach().numpy(), rtol=0, atol=0)
    np.testing.assert_array_equal(b.to_numpy(idx), ref_idx.numpy())
    g = rng.standard_normal(ref.shape)
    (gx,) = torch.autograd.grad(ref, xt, torch.from_numpy(g))
    got = b.max_pool_backward(b.from_numpy(g.astype(np.float32)), idx, x.shape)
    assert_close(b.to_numpy(got), gx.numpy(), **TOL)
    # Indices without the kernel's geometry take the default (scatter) path.
    plain = b.from_numpy(b.to_numpy(idx))
    assert_close(b.to_numpy(b.max_pool_backward(b.from_numpy(g.astype(np.float32)), plain, x.shape)), gx.numpy(), **TOL)


def test_max_pool_ties_pick_the_first_and_nan_wins(cube):
    torch = import_torch()
    x = np.array([[[[1.0, 1.0, 0.0], [1.0, np.nan, 2.0], [0.5, 2.0, 2.0]]]])
    ref, ref_idx = torch.nn.functional.max_pool2d(torch.from_numpy(x), 2, 1, return_indices=True)
    y, idx = cube.max_pool_with_indices(x, (2, 2), (1, 1), ((0, 0), (0, 0)), (1, 1), False)
    np.testing.assert_array_equal(idx, ref_idx.numpy())
    assert_close(y, ref.numpy())


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("case", POOL_CASES, ids=str)
def test_avg_pool_and_backward(cube, count_include_pad, case):
    torch = import_torch()
    spatial, kernel, stride, padding, _, ceil_mode = case
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3) + spatial)
    fn = torch.nn.functional.avg_pool1d if len(spatial) == 1 else torch.nn.functional.avg_pool2d
    xt = torch.from_numpy(x).requires_grad_()
    ref = fn(xt, kernel, stride, padding, ceil_mode, count_include_pad)
    pairs = tuple((p, p) for p in padding)
    assert_close(cube.avg_pool(x, kernel, stride, pairs, count_include_pad, ceil_mode), ref.detach().numpy(), **TOL)
    g = rng.standard_normal(ref.shape)
    (gx,) = torch.autograd.grad(ref, xt, torch.from_numpy(g))
    assert_close(
        cube.avg_pool_backward(g, x.shape, kernel, stride, pairs, count_include_pad, ceil_mode), gx.numpy(), **TOL
    )


def test_adaptive_pool_and_embedding(cube):
    torch = import_torch()
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 7, 9))
    xt = torch.from_numpy(x).requires_grad_()
    ref = torch.nn.functional.adaptive_avg_pool2d(xt, (3, 4))
    assert_close(cube.adaptive_avg_pool(x, (3, 4)), ref.detach().numpy(), **TOL)
    w = rng.standard_normal((10, 4))
    idx = np.array([[1, 3, 3], [9, 0, 1]], dtype=np.int64)
    assert_close(cube.embedding(w, idx), w[idx], **TOL)
    g = rng.standard_normal((2, 3, 4))
    expected = np.zeros_like(w)
    np.add.at(expected, idx.reshape(-1), g.reshape(-1, 4))
    assert_close(cube.embedding_backward(g, idx, 10), expected, **TOL)
    from ember.errors import IndexOutOfBoundsError

    with pytest.raises(IndexOutOfBoundsError, match="out of bounds for 10 embeddings"):
        cube.embedding(w, np.array([10]))


def test_conv_layer_trains_on_the_gpu(gpu):
    from ember.nn import Conv2dConfig
    from ember.tensor import layer_ops as F

    device = gpu.autodiff()
    device.seed(0)
    conv = Conv2dConfig((3, 4), 3, padding="same").init(device)
    x = Tensor.random([2, 3, 8, 8], device=device)
    y = F.avg_pool2d(F.max_pool2d(conv(x), 2, 2), 2)
    loss = y.mul(y).mean()
    grads = loss.backward()
    flex = Device.flex().autodiff()
    conv_flex = conv.to_device(flex)
    y_flex = F.avg_pool2d(F.max_pool2d(conv_flex(x.to_device(flex)), 2, 2), 2)
    grads_flex = y_flex.mul(y_flex).mean().backward()
    assert_close(loss, y_flex.mul(y_flex).mean().to_numpy(), rtol=1e-5)
    assert_close(
        conv.weight.val().grad(grads), conv_flex.weight.val().grad(grads_flex).to_numpy(), rtol=1e-4, atol=1e-6
    )
