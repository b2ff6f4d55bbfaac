"""The direct weight gradient of a float32 stride-1 convolution
(:mod:`ember.backend.kernel.llvm.direct_conv_grad`) in compiled plans' ``conv_weight_grad``:
against torch's float64 weight gradient (``torch.nn.grad.conv*d_weight``) and flex's
(the replay) under ``EMBER_GEMM=ember`` (the direct kernel) and ``=blas`` (im2col and
the product); and the kernel alone against numpy float64 at both vector widths."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from llvmlite import ir

from ember.backend.fusion.llvm import LLVMExecutor
from ember.backend.fusion.llvm.sgemm import GEMM_ENV
from ember.backend.kernel.llvm import jit
from ember.backend.kernel.llvm.direct_conv import DirectConv
from ember.backend.kernel.llvm.direct_conv_grad import (
    chunk_samples,
    direct_weight_grad_function,
    fits,
    lane_sums_function,
    lanes,
    padded_floats,
    tiling,
)
from tests.fusion.oracle import Case

pytestmark = pytest.mark.torch

# x shape, weight shape, padding per dim (lo, hi), dilation, groups; whether the direct
# kernel takes it (with 16-lane vectors, or 8 where rows fill those better)
_GRADS = {
    "small CNN conv1": ((64, 1, 28, 28), (16, 1, 3, 3), ((1, 1), (1, 1)), (1, 1), 1, True),
    "small CNN conv2": ((6, 16, 14, 14), (32, 16, 3, 3), ((1, 1), (1, 1)), (1, 1), 1, True),
    "batch 1, odd sizes": ((1, 3, 17, 15), (13, 3, 3, 3), ((1, 1), (1, 1)), (1, 1), 1, True),
    "asymmetric pads, 3x2 kernel": ((3, 2, 9, 11), (5, 2, 3, 2), ((2, 0), (1, 3)), (1, 1), 1, True),
    "dilation, no padding": ((2, 4, 12, 16), (9, 4, 3, 3), ((0, 0), (0, 0)), (2, 1), 1, True),
    "groups": ((5, 8, 9, 14), (6, 4, 3, 3), ((1, 1), (1, 1)), (1, 1), 2, True),
    "1-d": ((3, 5, 28), (7, 5, 3), ((1, 2),), (1,), 1, True),
    "3-d": ((2, 2, 5, 6, 15), (4, 2, 3, 3, 3), ((1, 1), (0, 1), (1, 0)), (1, 1, 1), 1, True),
    "a window too wide": ((2, 64, 6, 6), (8, 64, 3, 3), ((1, 1), (1, 1)), (1, 1), 1, False),
    "8-wide rows (digits)": ((4, 16, 8, 8), (32, 16, 3, 3), ((1, 1), (1, 1)), (1, 1), 1, True),
    "12-wide rows, groups": ((3, 6, 5, 12), (9, 2, 3, 3), ((1, 1), (2, 0)), (1, 1), 3, True),
    "rows too narrow (5)": ((4, 3, 6, 5), (8, 3, 3, 3), ((1, 1), (1, 1)), (1, 1), 1, False),
}


def _torch_weight_grad(torch, x, dy, w_shape, padding, dilation, groups):
    fn = (torch.nn.grad.conv1d_weight, torch.nn.grad.conv2d_weight, torch.nn.grad.conv3d_weight)[x.ndim - 3]
    pads = [p for pair in reversed(padding) for p in pair]  # F.pad: last dim first
    xt = torch.nn.functional.pad(torch.from_numpy(x.astype(np.float64)), pads)
    return fn(xt, w_shape, torch.from_numpy(dy.astype(np.float64)), dilation=dilation, groups=groups).numpy()


def _out_shape(x_shape, w_shape, padding, dilation):
    spatial = [s + lo + hi - d * (k - 1) for s, (lo, hi), d, k in zip(x_shape[2:], padding, dilation, w_shape[2:])]
    return (x_shape[0], w_shape[0], *spatial)


def _compiled_grad(monkeypatch, mode, x_np, dy_np, w_shape, padding, dilation, groups):
    monkeypatch.setenv(GEMM_ENV, mode)
    case = Case()
    x, dy = case.input(x_np), case.input(dy_np)
    rank = x_np.ndim - 2
    grad = case.ops.conv_weight_grad(x, dy, w_shape, (1,) * rank, padding, dilation, groups)
    return case.run(LLVMExecutor(), [grad])


@pytest.mark.parametrize("mode", ["ember", "blas"])
@pytest.mark.parametrize("name", sorted(_GRADS))
def test_weight_gradients_match_torch_float64_and_flex(torch, monkeypatch, name, mode, rng):
    x_shape, w_shape, padding, dilation, groups, direct = _GRADS[name]
    x_np = rng.standard_normal(x_shape).astype(np.float32)
    dy_np = rng.standard_normal(_out_shape(x_shape, w_shape, padding, dilation)).astype(np.float32)
    compiled, replayed, plan = _compiled_grad(monkeypatch, mode, x_np, dy_np, w_shape, padding, dilation, groups)
    want = _torch_weight_grad(torch, x_np, dy_np, w_shape, padding, dilation, groups)
    scale = max(float(np.abs(want).max()), 1.0)
    np.testing.assert_allclose(compiled[0], want, rtol=1e-5, atol=2e-6 * scale)
    np.testing.assert_allclose(compiled[0], replayed[0], rtol=2e-5, atol=4e-6 * scale)
    (variant,) = plan.variants
    out = _out_shape(x_shape, w_shape, padding, dilation)[2:]
    width = lanes(out[-1], jit.vector_width())
    conv = DirectConv(x_shape[1] // groups, w_shape[0] // groups, w_shape[2:], dilation, out, width)
    assert fits(conv) is direct
    assert ("_direct_dw" in variant.ir) is (mode == "ember" and fits(conv))


def test_special_values_reach_the_weights_they_touch(torch, monkeypatch, rng):
    """NaN and infinities in the input or the output gradient reach exactly the weights
    torch's reach; the lanes past a row's end (which would read the next row's
    infinity) add nothing."""
    x_shape, w_shape, padding = (3, 3, 10, 14), (11, 3, 3, 3), ((1, 1), (1, 1))
    x_np = rng.standard_normal(x_shape).astype(np.float32)
    x_np[0, 1, 4, 4] = np.nan
    x_np[1, 0, 0, 13] = np.inf
    x_np[2, 2, 9, 0] = -np.inf
    dy_np = rng.standard_normal(_out_shape(x_shape, w_shape, padding, (1, 1))).astype(np.float32)
    dy_np[2, 7, 4, 0] = np.inf  # the first column: row 3's last vector would read it
    compiled, _, plan = _compiled_grad(monkeypatch, "ember", x_np, dy_np, w_shape, padding, (1, 1), 1)
    want = _torch_weight_grad(torch, x_np, dy_np, w_shape, padding, (1, 1), 1)
    assert np.isnan(want).any() and np.isinf(want).any() and np.isfinite(want).any()
    np.testing.assert_array_equal(np.isnan(compiled[0]), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(compiled[0]), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(compiled[0][finite], want[finite], rtol=1e-5, atol=1e-4)
    assert "_direct_dw" in plan.variants[0].ir


def test_a_strided_weight_gradient_keeps_the_product(torch, monkeypatch, rng):
    x_np = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
    dy_np = rng.standard_normal((2, 8, 6, 6)).astype(np.float32)
    monkeypatch.setenv(GEMM_ENV, "ember")
    case = Case()
    grad = case.ops.conv_weight_grad(
        case.input(x_np), case.input(dy_np), (8, 3, 3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 1
    )
    compiled, _, plan = case.run(LLVMExecutor(), [grad])
    xt, dyt = torch.from_numpy(x_np.astype(np.float64)), torch.from_numpy(dy_np.astype(np.float64))
    want = torch.nn.grad.conv2d_weight(xt, (8, 3, 3, 3), dyt, stride=2, padding=1).numpy()
    np.testing.assert_allclose(compiled[0], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    assert "_direct_dw" not in plan.variants[0].ir


@pytest.mark.parametrize("width, vector_bits", [(16, 512), (8, 512), (8, 256)], ids=["avx512", "avx512-8", "avx2"])
@pytest.mark.parametrize(
    "conv, n",
    [
        (DirectConv(1, 16, (3, 3), (1, 1), (28, 28), 0), 13),  # chunks and a shorter last one
        (DirectConv(5, 11, (3, 2), (2, 1), (7, 9), 0), 3),  # remainder rows, dilation
        (DirectConv(3, 4, (5,), (1,), (37,), 0), 2),  # 1-d
        (DirectConv(2, 3, (2, 3, 2), (1, 1, 2), (3, 4, 5), 0), 4),  # 3-d, two blocks of positions
    ],
    ids=["conv1", "odd", "1-d", "3-d"],
)
def test_the_kernel_alone_against_numpy_float64(conv, n, width, vector_bits, rng):
    """Chunks of samples' padded inputs and output gradients (two more output channels
    between samples', as another group's would be: the kernel reads none of them)
    against a float64 loop over the kernel positions."""
    conv = DirectConv(conv.channels, conv.outputs, conv.kernel, conv.dilation, conv.out, width)
    samples = chunk_samples(conv, n)
    module = ir.Module("direct_dw_test")
    module.triple, module.data_layout = jit.triple(), jit.data_layout()
    weights = conv.outputs * conv.window
    stride = (conv.outputs + 2) * int(np.prod(conv.out))
    direct_weight_grad_function(module, "dw", conv, vector_bits, stride).linkage = "external"
    lane_sums_function(module, "sums", weights, width, vector_bits).linkage = "external"
    compiled = jit.compile_module(str(module), ["dw", "sums"], cache=False)
    p = ctypes.c_void_p
    run = ctypes.CFUNCTYPE(None, p, p, p, ctypes.c_int64)(compiled.addresses["dw"])
    sums = ctypes.CFUNCTYPE(None, p, p)(compiled.addresses["sums"])
    acc = np.zeros(weights * width, np.float32)
    want = np.zeros((conv.outputs, conv.channels, *conv.kernel))
    for first in range(0, n, samples):
        count = min(samples, n - first)
        padded = rng.standard_normal(padded_floats(conv, samples)).astype(np.float32)
        grad = rng.standard_normal((count, conv.outputs + 2, *conv.out)).astype(np.float32)
        grad[:, conv.outputs :] = np.nan  # not this group's
        run(padded.ctypes.data, grad.ctypes.data, acc.ctypes.data, count)
        x = padded.reshape((samples, conv.channels, *conv.padded))[:count].astype(np.float64)
        for position in np.ndindex(*conv.kernel):
            window = tuple(slice(k * d, k * d + o) for k, d, o in zip(position, conv.dilation, conv.out))
            dy = grad[:, : conv.outputs].reshape(count, conv.outputs, -1).astype(np.float64)
            xw = x[(slice(None), slice(None), *window)].reshape(count, conv.channels, -1)
            want[(slice(None), slice(None), *position)] += np.einsum("nop,ncp->oc", dy, xw)
    out = np.zeros(weights, np.float32)
    sums(acc.ctypes.data, out.ctypes.data)
    np.testing.assert_allclose(out.reshape(want.shape), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize(
    "last, vector_bits, width",
    [(8, 512, 8), (7, 512, 8), (5, 512, 8), (12, 512, 16), (14, 512, 16), (20, 512, 8), (24, 512, 16), (8, 256, 8)],
)
def test_lanes_fill_the_rows_best(last, vector_bits, width):
    """16 lanes with 512-bit vectors where they fill a row's vectors (3/4 of their
    lanes or as well as 8 do), else 8; 8 without AVX-512."""
    assert lanes(last, vector_bits) == width


@pytest.mark.parametrize("width", [16, 8])
def test_the_register_tile_follows_the_register_count(width):
    """AVX-512 has 32 vector registers at 256 bits as at 512: 3 rows by 9 kernel
    positions there, 2 by 6 with 16 registers, whatever the width."""
    conv = DirectConv(16, 32, (3, 3), (1, 1), (8, 8), width)
    rows, blocks = tiling(conv, 512)
    assert rows == 3 and blocks == [(0, 9)]
    rows, blocks = tiling(conv, 256)
    assert rows == 2 and blocks == [(0, 5), (5, 4)]
