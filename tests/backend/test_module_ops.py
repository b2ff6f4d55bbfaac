"""The module ops of the backend protocol: flex's kernels and the defaults written
over the primitives, against PyTorch, over awkward shapes (odd sizes; stride,
padding, dilation and groups together)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ember import Device
from ember.backend.module_ops import ModuleOps, conv_transpose_output_size
from tests.conftest import assert_close, import_torch

pytestmark = pytest.mark.torch

FLEX = Device.flex()._backend


class Defaults:
    """The flex backend seen through ModuleOps' defaults only."""

    def __getattr__(self, name):
        method = getattr(ModuleOps, name)
        return lambda *args: method(FLEX, *args)


IMPLS = {"flex": FLEX, "default": Defaults()}

# (batch, channels_in, spatial, channels_out, kernel, stride, padding pairs, dilation, groups)
CONV_CASES = [
    (2, 4, (7, 9), 6, (3, 2), (2, 1), ((1, 1), (0, 2)), (1, 2), 2),
    (1, 3, (5, 5), 3, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
    (2, 6, (8, 7), 4, (2, 3), (3, 2), ((2, 2), (1, 0)), (2, 1), 2),
    (3, 2, (6, 5), 4, (1, 1), (2, 2), ((0, 0), (0, 0)), (1, 1), 1),
    (2, 3, (11,), 6, (4,), (3,), ((2, 1),), (2,), 3),
    (1, 2, (4, 5, 3), 2, (2, 3, 2), (1, 2, 1), ((1, 0), (1, 1), (0, 1)), (1, 1, 2), 1),
]


def _torch_conv(torch, x, w, b, stride, padding, dilation, groups):
    flat = [p for pair in reversed(padding) for p in pair]
    fn = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d, 3: torch.nn.functional.conv3d}[len(stride)]
    return fn(torch.nn.functional.pad(x, flat), w, b, stride, 0, dilation, groups)


@pytest.mark.parametrize("impl", sorted(IMPLS))
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[2]}k{c[4]}s{c[5]}g{c[8]}")
def test_conv_and_its_gradients(impl, case):
    torch = import_torch()
    b_ = IMPLS[impl]
    n, c, spatial, o, kernel, stride, padding, dilation, groups = case
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c) + spatial)
    w = rng.standard_normal((o, c // groups) + kernel)
    bias = rng.standard_normal(o)
    xt, wt = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    ref = _torch_conv(torch, xt, wt, torch.from_numpy(bias), stride, padding, dilation, groups)
    y = b_.conv(x, w, bias, stride, padding, dilation, groups)
    assert_close(y, ref.detach().numpy(), rtol=1e-10, atol=1e-10)
    g = rng.standard_normal(ref.shape)
    gx, gw = torch.autograd.grad(ref, (xt, wt), torch.from_numpy(g))
    assert_close(
        b_.conv_weight_grad(x, g, w.shape, stride, padding, dilation, groups), gw.numpy(), rtol=1e-10, atol=1e-10
    )
    output_padding = tuple(
        size - conv_transpose_output_size(out, k, s, p, 0, d)
        for size, out, k, s, p, d in zip(spatial, g.shape[2:], kernel, stride, padding, dilation)
    )
    gx_ours = b_.conv_transpose(g, w, None, stride, padding, output_padding, dilation, groups)
    assert_close(gx_ours, gx.numpy(), rtol=1e-10, atol=1e-10)


# (batch, channels_in, spatial, channels_out, kernel, stride, padding, output_padding, dilation, groups)
CONV_T_CASES = [
    (2, 4, (5, 6), 6, (3, 2), (2, 3), (1, 0), (1, 2), (1, 1), 2),
    (1, 2, (4, 4), 3, (3, 3), (1, 1), (1, 1), (0, 0), (2, 2), 1),
    (2, 3, (3, 5), 2, (2, 2), (3, 2), (0, 1), (2, 1), (2, 1), 1),
    (2, 4, (7,), 2, (3,), (2,), (2,), (1,), (3,), 2),
]


@pytest.mark.parametrize("impl", sorted(IMPLS))
@pytest.mark.parametrize("case", CONV_T_CASES, ids=lambda c: f"{c[2]}k{c[4]}s{c[5]}g{c[9]}")
def test_conv_transpose(impl, case):
    args, expected = conv_transpose_with_bias_case(case)
    assert_close(IMPLS[impl].conv_transpose(*args), expected, rtol=1e-10, atol=1e-10)


def conv_transpose_with_bias_case(case):
    """``(arguments of ModuleOps.conv_transpose, torch's float64 result)`` for a case."""
    torch = import_torch()
    n, c, spatial, o, kernel, stride, padding, output_padding, dilation, groups = case
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, c) + spatial)
    w = rng.standard_normal((c, o // groups) + kernel)
    bias = rng.standard_normal(o)
    fn = torch.nn.functional.conv_transpose1d if len(spatial) == 1 else torch.nn.functional.conv_transpose2d
    ref = fn(
        torch.from_numpy(x),
        torch.from_numpy(w),
        torch.from_numpy(bias),
        stride,
        padding,
        output_padding,
        groups,
        dilation,
    )
    pairs = tuple((p, p) for p in padding)
    return (x, w, bias, stride, pairs, output_padding, dilation, groups), ref.numpy()


# (spatial, kernel, stride, padding, dilation, ceil_mode)
POOL_CASES = [
    ((7, 8), (3, 2), (2, 2), (1, 1), (1, 2), True),
    ((6, 6), (2, 2), (2, 2), (0, 0), (1, 1), False),
    ((9, 7), (3, 3), (2, 3), (1, 0), (2, 1), False),
    ((5, 6), (2, 3), (1, 2), (1, 1), (1, 1), True),
    ((10,), (3,), (2,), (1,), (2,), True),
]


@pytest.mark.parametrize("impl", sorted(IMPLS))
@pytest.mark.parametrize("case", POOL_CASES, ids=str)
def test_max_pool_indices_and_backward(impl, case):
    torch = import_torch()
    b_ = IMPLS[impl]
    spatial, kernel, stride, padding, dilation, ceil_mode = case
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3) + spatial)
    fn = torch.nn.functional.max_pool1d if len(spatial) == 1 else torch.nn.functional.max_pool2d
    xt = torch.from_numpy(x).requires_grad_()
    ref, ref_idx = fn(xt, kernel, stride, padding, dilation, ceil_mode=ceil_mode, return_indices=True)
    pairs = tuple((p, p) for p in padding)
    y, idx = b_.max_pool_with_indices(x, kernel, stride, pairs, dilation, ceil_mode)
    assert_close(y, ref.detach().numpy(), rtol=0, atol=0)
    np.testing.assert_array_equal(idx, ref_idx.numpy())
    assert_close(b_.max_pool(x, kernel, stride, pairs, dilation, ceil_mode), ref.detach().numpy(), rtol=0, atol=0)
    g = rng.standard_normal(ref.shape)
    (gx,) = torch.autograd.grad(ref, xt, torch.from_numpy(g))
    assert_close(b_.max_pool_backward(g, idx, x.shape), gx.numpy(), rtol=1e-12, atol=1e-12)


def test_max_pool_ties_pick_the_first_nan_wins_and_padding_never_does():
    torch = import_torch()
    x = np.array([[[[1.0, 1.0, 0.0], [1.0, np.nan, 2.0], [0.5, 2.0, 2.0]]]])
    ref, ref_idx = torch.nn.functional.max_pool2d(torch.from_numpy(x), 2, 1, return_indices=True)
    for b_ in IMPLS.values():
        y, idx = b_.max_pool_with_indices(x, (2, 2), (1, 1), ((0, 0), (0, 0)), (1, 1), False)
        np.testing.assert_array_equal(idx, ref_idx.numpy())
        assert_close(y, ref.numpy())
        assert_close(b_.max_pool(x, (2, 2), (1, 1), ((0, 0), (0, 0)), (1, 1), False), ref.numpy())
    # A window holding only -inf (and padding) names its first real element.
    x = np.array([[[[-np.inf, -np.inf, 1.0], [-np.inf, -np.inf, 2.0], [0.0, 3.0, 4.0]]]])
    ref, ref_idx = torch.nn.functional.max_pool2d(torch.from_numpy(x), 2, 2, padding=1, return_indices=True)
    for b_ in IMPLS.values():
        y, idx = b_.max_pool_with_indices(x, (2, 2), (2, 2), ((1, 1), (1, 1)), (1, 1), False)
        np.testing.assert_array_equal(idx, ref_idx.numpy())
        assert_close(y, ref.numpy())


@pytest.mark.parametrize("impl", sorted(IMPLS))
@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("case", POOL_CASES, ids=str)
def test_avg_pool_and_backward(impl, count_include_pad, case):
    torch = import_torch()
    b_ = IMPLS[impl]
    spatial, kernel, stride, padding, _, ceil_mode = case
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3) + spatial)
    fn = torch.nn.functional.avg_pool1d if len(spatial) == 1 else torch.nn.functional.avg_pool2d
    xt = torch.from_numpy(x).requires_grad_()
    ref = fn(xt, kernel, stride, padding, ceil_mode, count_include_pad)
    pairs = tuple((p, p) for p in padding)
    assert_close(b_.avg_pool(x, kernel, stride, pairs, count_include_pad, ceil_mode), ref.detach().numpy(), rtol=1e-12)
    g = rng.standard_normal(ref.shape)
    (gx,) = torch.autograd.grad(ref, xt, torch.from_numpy(g))
    gx_ours = b_.avg_pool_backward(g, x.shape, kernel, stride, pairs, count_include_pad, ceil_mode)
    assert_close(gx_ours, gx.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("impl", sorted(IMPLS))
@pytest.mark.parametrize(
    "sizes", [((7, 9), (3, 4)), ((8, 8), (4, 2)), ((5, 3), (5, 3)), ((4, 6), (1, 1)), ((5,), (3,))]
)
def test_adaptive_avg_pool(impl, sizes):
    torch = import_torch()
    b_ = IMPLS[impl]
    spatial, out = sizes
    x = np.random.default_rng(4).standard_normal((2, 3) + spatial)
    fn = torch.nn.functional.adaptive_avg_pool1d if len(spatial) == 1 else torch.nn.functional.adaptive_avg_pool2d
    xt = torch.from_numpy(x).requires_grad_()
    ref = fn(xt, out)
    assert_close(b_.adaptive_avg_pool(x, out), ref.detach().numpy(), rtol=1e-12)
    g = np.random.default_rng(5).standard_normal(ref.shape)
    (gx,) = torch.autograd.grad(ref, xt, torch.from_numpy(g))
    assert_close(b_.adaptive_avg_pool_backward(g, x.shape), gx.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_embedding_and_backward(impl):
    b_ = IMPLS[impl]
    rng = np.random.default_rng(6)
    w = rng.standard_normal((10, 4))
    idx = np.array([[1, 3, 3], [9, 0, 1]], dtype=np.int64)
    assert_close(b_.embedding(w, idx), w[idx])
    g = rng.standard_normal((2, 3, 4))
    expected = np.zeros_like(w)
    np.add.at(expected, idx.reshape(-1), g.reshape(-1, 4))
    assert_close(b_.embedding_backward(g, idx, 10), expected, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_half_precision_computes_in_float32(dtype):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 4, 6, 5)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 3)).astype(np.float32)
    pads = ((1, 1), (1, 1))
    ref = FLEX.conv(x, w, None, (1, 2), pads, (1, 1), 2)
    y = FLEX.conv(x.astype(dtype), w.astype(dtype), None, (1, 2), pads, (1, 1), 2)
    assert y.dtype == np.dtype(dtype)
    assert_close(y.astype(np.float32), ref, rtol=3e-2, atol=1e-1)
    g = rng.standard_normal(ref.shape).astype(np.float32)
    ref_w = FLEX.conv_weight_grad(x, g, w.shape, (1, 2), pads, (1, 1), 2)
    got_w = FLEX.conv_weight_grad(x.astype(dtype), g.astype(dtype), w.shape, (1, 2), pads, (1, 1), 2)
    assert got_w.dtype == np.dtype(dtype)
    assert_close(got_w.astype(np.float32), ref_w, rtol=3e-2, atol=3e-1)
    pooled, idx = FLEX.max_pool_with_indices(x.astype(dtype), (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), False)
    ref_pooled, ref_idx = FLEX.max_pool_with_indices(
        x.astype(dtype).astype(np.float32), (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), False
    )
    assert pooled.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(idx, ref_idx)
    avg = FLEX.avg_pool(x.astype(dtype), (3, 2), (1, 2), ((1, 1), (0, 0)), False, True)
    assert avg.dtype == np.dtype(dtype)
    assert_close(
        avg.astype(np.float32), FLEX.avg_pool(x, (3, 2), (1, 2), ((1, 1), (0, 0)), False, True), rtol=2e-2, atol=2e-2
    )


def test_flex_results_never_alias_its_scratch_buffers():
    rng = np.random.default_rng(8)
    x1, x2 = rng.standard_normal((2, 4, 6, 7)), rng.standard_normal((2, 4, 6, 7))
    w = rng.standard_normal((3, 4, 3, 3))
    pads = ((1, 1), (1, 1))
    calls = [
        lambda x: FLEX.conv(x, w, None, (1, 1), pads, (1, 1), 1),
        lambda x: FLEX.conv(x, w, None, (2, 1), pads, (1, 1), 1),
        lambda x: FLEX.conv_transpose(x[:, :3], w.swapaxes(0, 1)[:3].copy(), None, (1, 1), pads, (0, 0), (1, 1), 1),
        lambda x: FLEX.conv_transpose(x[:, :3], w.swapaxes(0, 1)[:3].copy(), None, (2, 2), pads, (1, 1), (1, 1), 1),
        lambda x: FLEX.conv_weight_grad(x, x[:, :3, :, :], (3, 4, 3, 3), (1, 1), pads, (1, 1), 1),
        lambda x: FLEX.max_pool_with_indices(x, (2, 2), (2, 2), ((1, 1), (0, 0)), (1, 1), True),
        lambda x: FLEX.max_pool(x, (3, 3), (1, 1), pads, (1, 1), False),
        lambda x: FLEX.avg_pool(x, (2, 3), (1, 2), pads, False, True),
        lambda x: FLEX.avg_pool_backward(x[:, :, :3, :3], (2, 4, 6, 6), (2, 2), (2, 2), ((0, 0), (0, 0)), True, False),
        lambda x: FLEX.avg_pool_backward(x, (2, 4, 6, 7), (3, 3), (1, 1), pads, True, False),
    ]
    for call in calls:
        first = call(x1)
        first = first if isinstance(first, tuple) else (first,)
        kept = [np.array(a, copy=True) for a in first]
        call(x2)
        for a, b in zip(first, kept):
            np.testing.assert_array_equal(a, b)


def test_flex_module_ops_are_thread_safe():
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(9)
    inputs = [rng.standard_normal((2, 3, 9, 8)) for _ in range(8)]
    w = rng.standard_normal((5, 3, 3, 3))

    def work(x):
        y = FLEX.conv(x, w, None, (1, 1), ((1, 1), (1, 1)), (1, 1), 1)
        return FLEX.max_pool_with_indices(y, (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), False)[0]

    expected = [work(x) for x in inputs]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(work, inputs * 4))
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result, expected[i % len(inputs)])
