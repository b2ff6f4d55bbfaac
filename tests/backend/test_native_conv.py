"""flex's native im2col (the kernel layer's column copy, the one fusion's compiled
convolutions run): convolution and its weight gradient against PyTorch and against
flex's numpy columns, over every stride/padding/dilation/groups case of
``test_module_ops.py`` (1-3 spatial dims), float32 and float64, and W3's shapes."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device
from ember.backend.module_ops import conv_output_size
from tests.backend.test_module_ops import CONV_CASES, _torch_conv
from tests.backend.test_native_pool import every_size, numpy_only  # noqa: F401 (a fixture)
from tests.conftest import assert_close, import_torch

pytestmark = pytest.mark.torch

FLEX = Device.flex()._backend


def _ran_natively(x, kernel, stride, padding, dilation, groups) -> bool:
    from ember.backend.flex.module_ops import _native_columns

    out = tuple(conv_output_size(*a) for a in zip(x.shape[2:], kernel, stride, padding, dilation))
    return _native_columns(x, kernel, stride, padding, dilation, out, groups) is not None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[2]}k{c[4]}s{c[5]}g{c[8]}")
def test_native_columns_conv_and_weight_grad(every_size, case, dtype, rng):  # noqa: F811
    torch = import_torch()
    n, c, spatial, o, kernel, stride, padding, dilation, groups = case
    x = rng.standard_normal((n, c) + spatial).astype(dtype)
    w = rng.standard_normal((o, c // groups) + kernel).astype(dtype)
    bias = rng.standard_normal(o).astype(dtype)
    assert _ran_natively(x, kernel, stride, padding, dilation, groups)
    xt, wt = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    ref = _torch_conv(torch, xt, wt, torch.from_numpy(bias), stride, padding, dilation, groups)
    tol = 1e-5 if dtype == np.float32 else 1e-10
    args = (stride, padding, dilation, groups)
    y = FLEX.conv(x, w, bias, *args)
    assert y.dtype == dtype
    assert_close(y, ref.detach().numpy(), rtol=tol, atol=tol)
    assert_close(y, numpy_only(FLEX.conv, x, w, bias, *args), rtol=tol / 10, atol=tol / 10)
    g = rng.standard_normal(ref.shape).astype(dtype)
    (gw,) = torch.autograd.grad(ref, (wt,), torch.from_numpy(g))
    ours = FLEX.conv_weight_grad(x, g, w.shape, *args)
    assert ours.dtype == dtype
    assert_close(ours, gw.numpy(), rtol=tol, atol=tol * 10)
    assert_close(ours, numpy_only(FLEX.conv_weight_grad, x, g, w.shape, *args), rtol=tol / 10, atol=tol)


@pytest.mark.parametrize("c_in, c_out, size", [(1, 16, 28), (16, 32, 14)])
def test_w3_convolutions_run_natively_by_default_and_match_torch(c_in, c_out, size, rng):
    """W3's two convolutions (batch 64, 3x3, padding 1), float32, no patching."""
    torch = import_torch()
    x = rng.standard_normal((64, c_in, size, size)).astype(np.float32)
    w = rng.standard_normal((c_out, c_in, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(c_out).astype(np.float32)
    args = ((1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    assert _ran_natively(x, (3, 3), *args)
    # The oracle in float64: float32 sums of 50,000 products differ in their last bits.
    xt, wt = (torch.from_numpy(a.astype(np.float64)).requires_grad_() for a in (x, w))
    ref = torch.nn.functional.conv2d(xt, wt, torch.from_numpy(bias.astype(np.float64)), padding=1)
    expected = ref.detach().numpy()
    y = FLEX.conv(x, w, bias, *args)
    assert y.dtype == np.float32
    assert_close(y, expected, rtol=1e-5, atol=1e-6 * np.abs(expected).max())
    g = rng.standard_normal(ref.shape).astype(np.float32)
    (gw,) = torch.autograd.grad(ref, (wt,), torch.from_numpy(g.astype(np.float64)))
    expected = gw.numpy()
    assert_close(FLEX.conv_weight_grad(x, g, w.shape, *args), expected, rtol=1e-5, atol=1e-6 * np.abs(expected).max())
