"""The direct float32 convolution (:mod:`ember.backend.kernel.llvm.direct_conv`) in
compiled inference plans, and max pooling over vectors of a row
(:mod:`ember.backend.kernel.llvm.pooling`): against torch's float64 convolution and
pooling, flex's eager convolution (the replay), and numpy float64 for the kernel
alone at both vector widths."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from llvmlite import ir

from ember import Device
from ember.backend.flex import native, native_pool
from ember.backend.flex.module_ops import _native_pool
from ember.backend.fusion.llvm import LLVMExecutor
from ember.backend.fusion.llvm.sgemm import GEMM_ENV
from ember.backend.fusion.steps import ConvChain
from ember.backend.kernel.llvm import jit
from ember.backend.kernel.llvm.direct_conv import MAX_WINDOW, DirectConv, direct_conv_function
from tests.fusion.oracle import Case

pytestmark = pytest.mark.torch

# (x shape, weight shape, padding per dim (lo, hi), dilation, groups)
_DIRECT = {
    "small CNN conv1, batch 1": ((1, 1, 28, 28), (16, 1, 3, 3), ((1, 1), (1, 1)), (1, 1), 1),
    "small CNN conv2": ((3, 16, 14, 14), (32, 16, 3, 3), ((1, 1), (1, 1)), (1, 1), 1),
    "odd sizes, 13 outputs": ((2, 3, 17, 15), (13, 3, 3, 3), ((1, 1), (1, 1)), (1, 1), 1),
    "asymmetric pads, 3x2 kernel": ((2, 2, 9, 11), (5, 2, 3, 2), ((2, 0), (1, 3)), (1, 1), 1),
    "dilation, no padding": ((2, 4, 12, 10), (9, 4, 3, 3), ((0, 0), (0, 0)), (2, 1), 1),
    "groups": ((2, 8, 9, 11), (6, 4, 3, 3), ((1, 1), (1, 1)), (1, 1), 2),
    "5x5, two output rows": ((2, 3, 6, 30), (8, 3, 5, 5), ((0, 0), (2, 2)), (1, 1), 1),
    "1-d": ((3, 5, 20), (7, 5, 3), ((1, 2),), (1,), 1),
    "3-d": ((2, 2, 5, 6, 7), (4, 2, 3, 3, 3), ((1, 1), (0, 1), (1, 0)), (1, 1, 1), 1),
    "widest window": ((2, 56, 6, 6), (10, 56, 3, 3), ((1, 1), (1, 1)), (1, 1), 1),
}


def _torch_conv(torch, x, w, b, stride, padding, dilation, groups):
    fn = (torch.nn.functional.conv1d, torch.nn.functional.conv2d, torch.nn.functional.conv3d)[x.ndim - 3]
    pads = [p for pair in reversed(padding) for p in pair]  # F.pad: last dim first
    xt = torch.nn.functional.pad(torch.from_numpy(x.astype(np.float64)), pads)
    wt, bt = torch.from_numpy(w.astype(np.float64)), torch.from_numpy(b.astype(np.float64))
    return fn(xt, wt, bt, stride=stride, dilation=dilation, groups=groups)


def _compiled(monkeypatch, x_np, w_np, b_np, stride, padding, dilation, groups, pooled):
    monkeypatch.setenv(GEMM_ENV, "ember")
    case = Case()
    x, w, b = case.input(x_np), case.input(w_np), case.input(b_np)
    y = case.ops.conv(x, w, b, stride, padding, dilation, groups)
    if pooled:
        rank = x_np.ndim - 2
        outs = [case.ops.max_pool(case.ops.relu(y), (2,) * rank, (2,) * rank, ((0, 0),) * rank, (1,) * rank, False)]
    else:
        outs = [y]
    return case.run(LLVMExecutor(), outs)


@pytest.mark.parametrize("pooled", [False, True], ids=["conv", "chain"])
@pytest.mark.parametrize("name", sorted(_DIRECT))
def test_direct_convolutions_match_torch_float64_and_flex(torch, monkeypatch, name, pooled, rng):
    x_shape, w_shape, padding, dilation, groups = _DIRECT[name]
    x_np = rng.standard_normal(x_shape).astype(np.float32)
    w_np = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
    b_np = rng.standard_normal(w_shape[0]).astype(np.float32)
    stride = (1,) * (len(x_shape) - 2)
    compiled, replayed, plan = _compiled(monkeypatch, x_np, w_np, b_np, stride, padding, dilation, groups, pooled)
    want = _torch_conv(torch, x_np, w_np, b_np, stride, padding, dilation, groups)
    if pooled:
        rank = len(x_shape) - 2
        pool = (None, torch.nn.functional.max_pool1d, torch.nn.functional.max_pool2d, torch.nn.functional.max_pool3d)
        want = pool[rank](torch.relu(want), 2, 2)
    want = want.numpy()
    scale = max(float(np.abs(want).max()), 1.0)
    np.testing.assert_allclose(compiled[0], want, rtol=1e-5, atol=1e-5 * scale)
    np.testing.assert_allclose(compiled[0], replayed[0], rtol=2e-5, atol=2e-5 * scale)
    (variant,) = plan.variants
    assert "ember_direct_conv_" in variant.ir, "the direct kernel did not run"
    assert '@"ember_sgemm_' not in variant.ir
    assert any(isinstance(s, ConvChain) for s in plan.schedule.steps) is pooled
    # a plain convolution calls the batch loop flex's eager one compiled; a chain emits its own
    assert ('declare void @"ember_direct_conv_loop_' in variant.ir) is not pooled


def test_special_values_reach_the_outputs_they_touch(torch, monkeypatch, rng):
    x_np = rng.standard_normal((2, 3, 10, 9)).astype(np.float32)
    x_np[0, 1, 4, 4] = np.nan
    x_np[1, 0, 0, 8] = np.inf
    x_np[1, 2, 9, 0] = -np.inf
    w_np = rng.standard_normal((11, 3, 3, 3)).astype(np.float32)
    b_np = rng.standard_normal(11).astype(np.float32)
    padding = ((1, 1), (1, 1))
    compiled, _, plan = _compiled(monkeypatch, x_np, w_np, b_np, (1, 1), padding, (1, 1), 1, False)
    want = _torch_conv(torch, x_np, w_np, b_np, (1, 1), padding, (1, 1), 1).numpy()
    assert np.isnan(want).any() and np.isinf(want).any()
    np.testing.assert_array_equal(np.isnan(compiled[0]), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(compiled[0]), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(compiled[0][finite], want[finite], rtol=1e-5, atol=1e-4)
    assert "ember_direct_conv_" in plan.variants[0].ir


@pytest.mark.parametrize(
    "x_shape, w_shape, stride, mode",
    [
        ((2, 3, 12, 12), (8, 3, 3, 3), (2, 2), "ember"),  # strided: im2col and the product
        ((2, 64, 6, 6), (8, 64, 3, 3), (1, 1), "ember"),  # a window past MAX_WINDOW
        ((2, 16, 6, 6), (8, 16, 1, 1), (1, 1), "ember"),  # pointwise: the input is the columns
        ((2, 3, 12, 12), (8, 3, 3, 3), (1, 1), "blas"),  # BLAS's plans keep BLAS
    ],
    ids=["strided", "wide window", "pointwise", "blas"],
)
def test_other_convolutions_keep_the_product(torch, monkeypatch, x_shape, w_shape, stride, mode, rng):
    monkeypatch.setenv(GEMM_ENV, mode)
    x_np = rng.standard_normal(x_shape).astype(np.float32)
    w_np = rng.standard_normal(w_shape).astype(np.float32)
    b_np = rng.standard_normal(w_shape[0]).astype(np.float32)
    pad = w_shape[-1] // 2
    padding = ((pad, pad), (pad, pad))
    case = Case()
    y = case.ops.conv(case.input(x_np), case.input(w_np), case.input(b_np), stride, padding, (1, 1), 1)
    compiled, _, plan = case.run(LLVMExecutor(), [y])
    want = _torch_conv(torch, x_np, w_np, b_np, stride, padding, (1, 1), 1).numpy()
    np.testing.assert_allclose(compiled[0], want, rtol=1e-5, atol=1e-4)
    assert "ember_direct_conv_" not in plan.variants[0].ir


def test_a_float64_convolution_is_not_direct(monkeypatch, rng):
    monkeypatch.setenv(GEMM_ENV, "ember")
    case = Case()
    x = case.input(rng.standard_normal((2, 3, 8, 8)))
    w = case.input(rng.standard_normal((4, 3, 3, 3)))
    y = case.ops.conv(x, w, None, (1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    compiled, replayed, plan = case.run(LLVMExecutor(), [y])
    np.testing.assert_allclose(compiled[0], replayed[0], rtol=1e-12)
    assert "ember_direct_conv_" not in plan.variants[0].ir


def _reference(conv: DirectConv, padded: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """The virtual output's real positions in float64: a plain loop over the window."""
    x = padded[: conv.channels * conv.plane].reshape((conv.channels, *conv.padded)).astype(np.float64)
    w = weight.reshape((conv.outputs, conv.channels, *conv.kernel)).astype(np.float64)
    out = np.zeros((conv.outputs, *conv.out))
    for position in np.ndindex(*conv.kernel):
        window = tuple(slice(k * d, k * d + o) for k, d, o in zip(position, conv.dilation, conv.out))
        out += np.einsum("oc,c...->o...", w[(slice(None), slice(None), *position)], x[(slice(None), *window)])
    return out


@pytest.mark.parametrize("with_bias", [False, True], ids=["no bias", "bias"])
@pytest.mark.parametrize("width", [16, 8], ids=["avx512", "avx2"])
@pytest.mark.parametrize(
    "conv",
    [
        DirectConv(1, 16, (3, 3), (1, 1), (28, 28), 0),
        DirectConv(5, 11, (3, 2), (2, 1), (7, 9), 0),  # remainder rows, dilation, rows narrower than a vector
        DirectConv(3, 4, (5,), (1,), (37,), 0),  # 1-d: no position thrown away
        DirectConv(2, 3, (2, 3, 2), (1, 1, 2), (3, 4, 5), 0),  # 3-d
    ],
    ids=["conv1", "odd", "1-d", "3-d"],
)
def test_the_kernel_alone_against_numpy_float64(conv, width, with_bias, rng):
    conv = DirectConv(conv.channels, conv.outputs, conv.kernel, conv.dilation, conv.out, width)
    module = ir.Module("direct_test")
    module.triple, module.data_layout = jit.triple(), jit.data_layout()
    direct_conv_function(module, "direct", conv, None, with_bias).linkage = "external"
    compiled = jit.compile_module(str(module), ["direct"], cache=False)
    pointers = [ctypes.c_void_p] * 4
    run = ctypes.CFUNCTYPE(None, *pointers)(compiled.addresses["direct"])
    padded = rng.standard_normal(conv.padded_floats).astype(np.float32)
    weight = rng.standard_normal(conv.outputs * conv.window).astype(np.float32)
    bias = rng.standard_normal(conv.outputs).astype(np.float32)
    # a guard on each side: the masked stores write the output's positions and no other
    out = np.full(conv.outputs * int(np.prod(conv.out)) + 64, np.nan, np.float32)
    run(padded.ctypes.data, weight.ctypes.data, out[32:].ctypes.data, bias.ctypes.data if with_bias else None)
    assert np.isnan(out[:32]).all() and np.isnan(out[-32:]).all()
    got = out[32:-32].reshape((conv.outputs, *conv.out))
    want = _reference(conv, padded, weight)
    if with_bias:
        want += bias.astype(np.float64).reshape((-1,) + (1,) * len(conv.out))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_which_geometries_fit():
    assert DirectConv(16, 32, (3, 3), (1, 1), (14, 14), 16).fits()
    assert not DirectConv(16, 32, (1, 1), (1, 1), (14, 14), 16).fits()  # pointwise
    channels = MAX_WINDOW // 9 + 1
    assert not DirectConv(channels, 32, (3, 3), (1, 1), (14, 14), 16).fits()  # a wide window
    assert not DirectConv(3, 64, (3, 3), (1, 1), (224, 224), 16).fits()  # past the cache budget


# (spatial, kernel, stride, dilation): every window inside, no padding
# (float32 vectors hold 16 outputs, float64 8; a narrower row is one masked vector)
_POOLS = [
    ((28, 28), (2, 2), (2, 2), (1, 1)),  # 14 outputs a row: one masked vector (float64: two overlapping)
    ((8, 70), (2, 2), (2, 2), (1, 1)),  # 35 outputs: two vectors and an overlapping third
    ((4, 32), (2, 2), (2, 2), (1, 1)),  # 16 outputs: one whole vector
    ((6, 10), (2, 2), (2, 2), (1, 1)),  # 5 outputs: a masked vector of 8
    ((9, 15), (3, 3), (2, 2), (1, 1)),  # overlapping windows, 7 outputs
    ((11, 21), (2, 3), (1, 2), (2, 2)),  # dilation, stride 1 down
    ((7, 7), (2, 2), (2, 2), (1, 1)),  # 3 outputs a row: one at a time
    ((40,), (4,), (3,), (1,)),  # 1-d
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", _POOLS, ids=str)
def test_pooling_over_vectors_matches_torch_bit_for_bit(torch, monkeypatch, case, dtype, rng):
    monkeypatch.setattr(native, "MIN_ELEMENTS", 0)  # flex's native pooling at any size
    monkeypatch.delitem(native_pool._STATE, "off", raising=False)
    spatial, kernel, stride, dilation = case
    x = rng.standard_normal((2, 3, *spatial)).astype(dtype)
    x.reshape(-1)[rng.choice(x.size, 5, replace=False)] = np.nan
    x.reshape(-1)[rng.choice(x.size, 5, replace=False)] = np.inf
    flat = x.reshape(-1)
    zeros = rng.choice(x.size, 40, replace=False)  # ties of +0 and -0: the first one wins
    flat[zeros] = np.where(np.arange(40) % 2 == 0, 0.0, -0.0)
    fn = torch.nn.functional.max_pool1d if len(spatial) == 1 else torch.nn.functional.max_pool2d
    want = fn(torch.from_numpy(x), kernel, stride, 0, dilation).numpy()
    flex = Device.flex()._backend
    pads = tuple((0, 0) for _ in spatial)
    assert _native_pool(x, kernel, stride, pads, dilation, False, with_indices=False) is not None
    got = flex.max_pool(x, kernel, stride, pads, dilation, False)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    # the compiled plan's pooling (a library step) is the same loop
    case_ = Case()
    y = case_.ops.max_pool(case_.input(x), kernel, stride, pads, dilation, False)
    compiled, _, _ = case_.run(LLVMExecutor(), [y])
    np.testing.assert_array_equal(compiled[0], want)
    np.testing.assert_array_equal(np.signbit(compiled[0]), np.signbit(want))
