"""Compiled float32 convolutions through ember's own product (``EMBER_GEMM=ember``) and
through BLAS (``EMBER_GEMM=blas``), whatever the host would choose: against flex's
convolution (the replay) and torch, for the shapes the product's paths take (a
convolution per sample and group, a pointwise one reading its input, the batch as one
product, a chain with its epilogue and pooling, a stride-1 ``conv_transpose``)."""

from __future__ import annotations

import numpy as np
import pytest

from ember.backend.fusion.llvm import LLVMExecutor
from ember.backend.fusion.llvm.conv import conv_geometry
from ember.backend.fusion.llvm.sgemm import GEMM_ENV, computes_gradients, direct_convolutions, own_sgemm
from ember.backend.fusion.steps import ConvChain, Library
from ember.backend.kernel.llvm import jit
from ember.errors import ConfigError
from tests.fusion.oracle import Case

# (x shape, weight shape, stride, padding, groups, pooled after a relu)
_CONVS = [
    ((2, 3, 17, 15), (13, 3, 3, 3), (1, 1), ((1, 1), (1, 1)), 1, False),
    ((1, 3, 30, 30), (16, 3, 7, 7), (2, 2), ((3, 3), (3, 3)), 1, True),  # ResNet's stem, smaller
    ((2, 20, 9, 9), (40, 20, 1, 1), (1, 1), ((0, 0), (0, 0)), 1, True),  # pointwise
    ((2, 8, 10, 10), (12, 4, 3, 3), (2, 1), ((1, 0), (2, 1)), 2, False),  # groups, asymmetric
    ((3, 64, 7, 7), (256, 64, 3, 3), (1, 1), ((1, 1), (1, 1)), 1, False),  # the batch as one product
]


def _torch_conv(torch, x, w, b, stride, padding, groups):
    xt = torch.from_numpy(x.astype(np.float64))
    lo = [p[0] for p in padding]
    hi = [p[1] for p in padding]
    xt = torch.nn.functional.pad(xt, (lo[1], hi[1], lo[0], hi[0]))
    y = torch.nn.functional.conv2d(xt, torch.from_numpy(w.astype(np.float64)), torch.from_numpy(b.astype(np.float64)),
                                   stride=stride, groups=groups)  # fmt: skip
    return y.numpy()


@pytest.mark.parametrize("mode", ["ember", "blas"])
@pytest.mark.parametrize("config", _CONVS, ids=["3x3", "stem", "pointwise", "groups", "batched"])
def test_compiled_convolutions_match_torch_and_flex(torch, monkeypatch, mode, config, rng):
    monkeypatch.setenv(GEMM_ENV, mode)
    x_shape, w_shape, stride, padding, groups, pooled = config
    x_np = rng.standard_normal(x_shape).astype(np.float32)
    w_np = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
    b_np = rng.standard_normal(w_shape[0]).astype(np.float32)
    case = Case()
    x, w, b = case.input(x_np), case.input(w_np), case.input(b_np)
    y = case.ops.conv(x, w, b, stride, padding, (1, 1), groups)
    outs = [y, case.ops.max_pool(case.ops.relu(y), (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), False)] if pooled else [y]
    compiled, replayed, plan = case.run(LLVMExecutor(), outs)
    want = _torch_conv(torch, x_np, w_np, b_np, stride, padding, groups)
    scale = max(float(np.abs(want).max()), 1.0)
    np.testing.assert_allclose(compiled[0], want, rtol=1e-5, atol=1e-5 * scale)
    for got, expected in zip(compiled, replayed):
        np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5 * scale)
    steps = plan.schedule.steps
    conv = next(s.conv if isinstance(s, ConvChain) else s for s in steps if isinstance(s, (ConvChain, Library)))
    (variant,) = plan.variants
    # ember's own code: its product, or the direct kernel (stride 1, small windows)
    direct = config is _CONVS[0]
    assert ('@"ember_sgemm_' in variant.ir) is (mode == "ember" and not direct)
    assert ("ember_direct_conv_" in variant.ir) is (mode == "ember" and direct)
    if config is _CONVS[-1]:
        assert conv_geometry(plan.schedule.graph, conv.node).batched


# (x shape, weight shape, padding, output padding, dilation, groups) of stride-1
# transposed convolutions: small windows (the direct kernel under ``ember``) and one
# wider than the direct kernel takes (ember's product)
_TRANSPOSES = [
    ((2, 4, 6, 5), (4, 3, 3, 3), ((1, 0), (0, 1)), (0, 0), (1, 2), 1),
    ((3, 32, 14, 14), (32, 16, 3, 3), ((1, 1), (1, 1)), (0, 0), (1, 1), 1),  # W3's input gradient
    ((2, 6, 7, 9), (6, 2, 3, 2), ((0, 0), (1, 1)), (1, 0), (2, 1), 3),  # groups, output padding
    ((1, 80, 5, 5), (80, 8, 3, 3), ((1, 1), (1, 1)), (0, 0), (1, 1), 1),  # window 720: the product
]


@pytest.mark.parametrize("mode", ["ember", "blas"])
@pytest.mark.parametrize("config", _TRANSPOSES, ids=["dilated", "w3", "groups", "wide"])
def test_a_stride_1_conv_transpose_through_either_product(torch, monkeypatch, mode, config, rng):
    monkeypatch.setenv(GEMM_ENV, mode)
    x_shape, w_shape, padding, output_padding, dilation, groups = config
    x_np = rng.standard_normal(x_shape).astype(np.float32)
    w_np = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
    b_np = rng.standard_normal(w_shape[1] * groups).astype(np.float32)
    case = Case()
    x, w, b = case.input(x_np), case.input(w_np), case.input(b_np)
    y = case.ops.conv_transpose(x, w, b, (1, 1), padding, output_padding, dilation, groups)
    compiled, replayed, plan = case.run(LLVMExecutor(), [y])
    np.testing.assert_allclose(compiled[0], replayed[0], rtol=2e-5, atol=2e-5 * np.abs(replayed[0]).max())
    f64 = torch.float64
    want = torch.nn.functional.conv_transpose2d(
        torch.from_numpy(x_np).to(f64), torch.from_numpy(w_np).to(f64), torch.from_numpy(b_np).to(f64),
        stride=1, output_padding=output_padding, groups=groups, dilation=dilation,
    ).numpy()  # fmt: skip
    lo, hi = [p[0] for p in padding], [p[1] for p in padding]  # torch pads symmetrically: crop
    want = want[:, :, lo[0] : want.shape[2] - hi[0], lo[1] : want.shape[3] - hi[1]]
    np.testing.assert_allclose(compiled[0], want, rtol=1e-5, atol=1e-5 * max(float(np.abs(want).max()), 1.0))
    (variant,) = plan.variants
    direct = config is not _TRANSPOSES[-1]  # the others' windows are small enough
    assert ("ember_direct_conv_" in variant.ir) is (mode == "ember" and direct)
    assert ('@"ember_sgemm_' in variant.ir) is (mode == "ember" and not direct)


def test_a_float64_convolution_keeps_blas(monkeypatch, rng):
    monkeypatch.setenv(GEMM_ENV, "ember")
    case = Case()
    x = case.input(rng.standard_normal((2, 3, 8, 8)))
    w = case.input(rng.standard_normal((5, 3, 3, 3)))
    y = case.ops.conv(x, w, None, (1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    compiled, replayed, plan = case.run(LLVMExecutor(), [y])
    np.testing.assert_allclose(compiled[0], replayed[0], rtol=1e-12, atol=1e-12 * np.abs(replayed[0]).max())
    (variant,) = plan.variants
    assert '@"ember_sgemm_' not in variant.ir


def test_the_setting_is_checked(monkeypatch):
    monkeypatch.setenv(GEMM_ENV, "fast")
    with pytest.raises(ConfigError, match="EMBER_GEMM='fast'"):
        own_sgemm()
    monkeypatch.setenv(GEMM_ENV, "blas")
    assert own_sgemm() is None
    monkeypatch.setenv(GEMM_ENV, "ember")
    assert own_sgemm() is not None


@pytest.mark.parametrize("mode", ["ember", "blas"])
def test_matmuls_through_either_product(monkeypatch, mode, rng):
    """Plain products (a batch sharing B folded into one, a batched one, a transposed
    operand, which stays on BLAS) against float64 numpy."""
    monkeypatch.setenv(GEMM_ENV, mode)
    case = Case()
    a_np = rng.standard_normal((3, 37, 70)).astype(np.float32)
    w_np = rng.standard_normal((70, 45)).astype(np.float32)
    v_np = rng.standard_normal((3, 45, 29)).astype(np.float32)
    a, w, v = case.input(a_np), case.input(w_np), case.input(v_np)
    shared = case.ops.matmul(a, w)
    batched = case.ops.matmul(shared, v)
    transposed = case.ops.matmul(case.ops.permute(a, (0, 2, 1)), case.ops.permute(a, (0, 1, 2)))
    compiled, _replayed, plan = case.run(LLVMExecutor(), [shared, batched, transposed])
    a64 = a_np.astype(np.float64)
    shared64 = a64 @ w_np
    for got, want in zip(compiled, (shared64, shared64 @ v_np, np.swapaxes(a64, 1, 2) @ a64)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    (variant,) = plan.variants
    assert ('@"ember_sgemm_' in variant.ir) is (mode == "ember")


def test_auto_keeps_blas_in_plans_that_compute_gradients(monkeypatch, rng):
    monkeypatch.setenv(GEMM_ENV, "auto")
    case = Case()
    x = case.input(rng.standard_normal((2, 3, 8, 8)).astype(np.float32))
    w = case.input(rng.standard_normal((5, 3, 3, 3)).astype(np.float32))
    y = case.ops.conv(x, w, None, (1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    forward, _ = case.abstract([y])
    assert not computes_gradients(forward)
    assert own_sgemm(forward) == own_sgemm()  # the host decides (AVX-512 and a narrower BLAS)
    grad = case.ops.conv_weight_grad(x, y, (5, 3, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    training, _ = case.abstract([y, grad])
    assert computes_gradients(training)
    assert own_sgemm(training) is None
    # small convolutions run the direct kernel in training plans too, on 512-bit hosts
    assert direct_convolutions() is (jit.vector_width() == 512)
    monkeypatch.setenv(GEMM_ENV, "ember")
    assert own_sgemm(training) is not None and direct_convolutions()
    monkeypatch.setenv(GEMM_ENV, "blas")
    assert not direct_convolutions()


def test_a_changed_setting_plans_the_same_graph_again(monkeypatch, rng):
    """One executor, one graph: a plan built under ``EMBER_GEMM=ember`` is not reused
    under ``blas`` (the setting is part of the plan cache's key), and is again under ``ember``."""
    case = Case()
    x = case.input(rng.standard_normal((2, 3, 8, 8)).astype(np.float32))
    w = case.input(rng.standard_normal((5, 3, 3, 3)).astype(np.float32))
    graph, _ = case.abstract([case.ops.conv(x, w, None, (1, 1), ((1, 1), (1, 1)), (1, 1), 1)])
    executor = LLVMExecutor()
    monkeypatch.setenv(GEMM_ENV, "ember")
    own = executor.plan(graph)
    monkeypatch.setenv(GEMM_ENV, "blas")
    blas = executor.plan(graph)
    assert blas is not own
    monkeypatch.setenv(GEMM_ENV, "ember")
    assert executor.plan(graph) is own
