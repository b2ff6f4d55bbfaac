"""flex's native max pooling (the kernel layer's loop nest, the one fusion compiles):
against PyTorch's max_pool forward, indices and backward, and bit for bit against
flex's numpy version, over every stride/padding/dilation/ceil_mode case of
``test_module_ops.py``, float32 and float64, ties, NaN and all ``-inf`` windows."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device
from ember.backend.flex import native, native_pool
from ember.backend.flex.module_ops import _native_pool
from ember.errors import IndexOutOfBoundsError
from tests.backend.test_module_ops import POOL_CASES
from tests.conftest import assert_close, import_torch

pytestmark = pytest.mark.torch

FLEX = Device.flex()._backend


@pytest.fixture
def every_size(monkeypatch):
    """The native kernels for arrays of any size (not only the large ones)."""
    monkeypatch.setattr(native, "MIN_ELEMENTS", 0)
    monkeypatch.delitem(native_pool._STATE, "off", raising=False)


def numpy_only(fn, *args):
    """``fn(*args)`` with flex's native pooling and im2col off (its numpy versions)."""
    native_pool._STATE["off"] = True
    try:
        return fn(*args)
    finally:
        del native_pool._STATE["off"]


def _pool_args(case):
    _spatial, kernel, stride, padding, dilation, ceil_mode = case
    return kernel, stride, tuple((p, p) for p in padding), dilation, ceil_mode


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", POOL_CASES, ids=str)
def test_native_max_pool_matches_torch_and_numpy(every_size, case, dtype, rng):
    torch = import_torch()
    spatial, kernel, stride, padding, dilation, ceil_mode = case
    x = rng.standard_normal((2, 3) + spatial).astype(dtype)
    args = _pool_args(case)
    assert _native_pool(x, *args, with_indices=True) is not None  # the kernel layer's loop, not numpy's
    fn = torch.nn.functional.max_pool1d if len(spatial) == 1 else torch.nn.functional.max_pool2d
    xt = torch.from_numpy(x).requires_grad_()
    ref, ref_idx = fn(xt, kernel, stride, padding, dilation, ceil_mode=ceil_mode, return_indices=True)
    y, idx = FLEX.max_pool_with_indices(x, *args)
    assert y.dtype == dtype and idx.dtype == np.int64
    np.testing.assert_array_equal(y, ref.detach().numpy())
    np.testing.assert_array_equal(idx, ref_idx.numpy())
    np.testing.assert_array_equal(FLEX.max_pool(x, *args), ref.detach().numpy())
    numpy_y, numpy_idx = numpy_only(FLEX.max_pool_with_indices, x, *args)
    np.testing.assert_array_equal(y, numpy_y)
    np.testing.assert_array_equal(idx, numpy_idx)
    g = rng.standard_normal(ref.shape).astype(dtype)
    (gx,) = torch.autograd.grad(ref, xt, torch.from_numpy(g))
    back = FLEX.max_pool_backward(g, idx, x.shape)
    assert back.dtype == dtype
    assert_close(back, gx.numpy(), rtol=1e-6 if dtype == np.float32 else 1e-12, atol=1e-6)
    np.testing.assert_array_equal(back, numpy_only(FLEX.max_pool_backward, g, idx, x.shape))


def test_native_max_pool_ties_nan_and_all_neg_inf_windows(every_size):
    torch = import_torch()
    x = np.array([[[[1.0, 1.0, 0.0], [1.0, np.nan, 2.0], [0.5, 2.0, 2.0]]]])
    ref, ref_idx = torch.nn.functional.max_pool2d(torch.from_numpy(x), 2, 1, return_indices=True)
    y, idx = FLEX.max_pool_with_indices(x, (2, 2), (1, 1), ((0, 0), (0, 0)), (1, 1), False)
    np.testing.assert_array_equal(idx, ref_idx.numpy())
    assert_close(y, ref.numpy())
    assert_close(FLEX.max_pool(x, (2, 2), (1, 1), ((0, 0), (0, 0)), (1, 1), False), ref.numpy())
    x = np.array([[[[-np.inf, -np.inf, 1.0], [-np.inf, -np.inf, 2.0], [0.0, 3.0, 4.0]]]])
    ref, ref_idx = torch.nn.functional.max_pool2d(torch.from_numpy(x), 2, 2, padding=1, return_indices=True)
    y, idx = FLEX.max_pool_with_indices(x, (2, 2), (2, 2), ((1, 1), (1, 1)), (1, 1), False)
    np.testing.assert_array_equal(idx, ref_idx.numpy())
    assert_close(y, ref.numpy())


def test_a_large_pooling_runs_natively_by_default_and_matches_torch(rng):
    """W3's first pooling (64x16x28x28, above the size floor), no patching."""
    torch = import_torch()
    x = rng.standard_normal((64, 16, 28, 28)).astype(np.float32)
    zero = ((0, 0), (0, 0))
    assert _native_pool(x, (2, 2), (2, 2), zero, (1, 1), False, with_indices=True) is not None
    xt = torch.from_numpy(x).requires_grad_()
    ref, ref_idx = torch.nn.functional.max_pool2d(xt, 2, return_indices=True)
    y, idx = FLEX.max_pool_with_indices(x, (2, 2), (2, 2), zero, (1, 1), False)
    np.testing.assert_array_equal(y, ref.detach().numpy())
    np.testing.assert_array_equal(idx, ref_idx.numpy())
    g = rng.standard_normal(ref.shape).astype(np.float32)
    (gx,) = torch.autograd.grad(ref, xt, torch.from_numpy(g))
    np.testing.assert_array_equal(FLEX.max_pool_backward(g, idx, x.shape), gx.numpy())


@pytest.mark.parametrize("bad", [-1, 36])
def test_max_pool_backward_rejects_an_index_outside_the_plane(every_size, bad):
    grad = np.ones((1, 2, 3, 3), np.float32)
    indices = np.zeros((1, 2, 3, 3), np.int64)
    indices[0, 1, 2, 2] = bad
    with pytest.raises(IndexOutOfBoundsError, match=rf"max_pool_backward: index {bad} is out of bounds.*size 36"):
        FLEX.max_pool_backward(grad, indices, (1, 2, 6, 6))
