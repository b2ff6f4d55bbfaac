"""flex's native im2col and col2im (the kernel layer's column copy and its adjoint,
the loop nests fusion's compiled convolutions run): convolution, its weight gradient,
its input gradient and the transposed convolution against PyTorch and against flex's
numpy columns, over every stride/padding/dilation/groups case of
``test_module_ops.py`` (1-3 spatial dims), float32 and float64, and W3's shapes;
col2im bit for bit against a numpy col2im that adds the kernel positions in turn."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device
from ember.backend.flex import module_ops, native_conv
from ember.backend.module_ops import conv_output_size, conv_transpose_output_size
from tests.backend.test_module_ops import CONV_CASES, CONV_T_CASES, _torch_conv, conv_transpose_with_bias_case
from tests.backend.test_native_pool import every_size, numpy_only  # noqa: F401 (a fixture)
from tests.conftest import assert_close, import_torch

pytestmark = pytest.mark.torch

FLEX = Device.flex()._backend


@pytest.fixture(autouse=True)
def _columns_path(monkeypatch):
    """These test the column path: ``EMBER_GEMM=blas`` keeps float32 stride-1 small
    convolutions off the direct kernel (tests/backend/test_native_direct.py tests that)."""
    monkeypatch.setenv("EMBER_GEMM", "blas")


def _ran_natively(x, kernel, stride, padding, dilation, groups) -> bool:
    from ember.backend.flex.module_ops import native_columns

    out = tuple(conv_output_size(*a) for a in zip(x.shape[2:], kernel, stride, padding, dilation))
    return native_columns(x, kernel, stride, padding, dilation, out, groups) is not None


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


def _numpy_col2im(cols, y_shape, kernel, stride, pad, dilation, out, groups, bias):
    """The oracle: a zeroed image (grown to hold every window), each kernel position's
    columns added in turn by strided slices, cropped, then the bias added."""
    n, c = y_shape[:2]
    spatial = y_shape[2:]
    k_total = int(np.prod(kernel))
    per_k = cols.reshape((groups, c // groups, k_total, n) + out)
    per_k = np.moveaxis(per_k, 3, 0).reshape((n, c, k_total) + out)
    full = tuple(
        max(s + p, (o - 1) * st + (k - 1) * d + 1)
        for s, p, o, st, k, d in zip(spatial, pad, out, stride, kernel, dilation)
    )
    image = np.zeros((n, c) + full, dtype=cols.dtype)
    for k_flat, offset in enumerate(np.ndindex(*kernel)):
        window = tuple(slice(i * d, i * d + (o - 1) * st + 1, st) for i, d, o, st in zip(offset, dilation, out, stride))
        image[(slice(None), slice(None)) + window] += per_k[:, :, k_flat]
    y = image[(slice(None), slice(None)) + tuple(slice(p, p + s) for p, s in zip(pad, spatial))]
    return y if bias is None else y + bias.reshape((1, c) + (1,) * len(spatial))


def _col2im_geometries():
    """(image shape, kernel, stride, leading pad, dilation, column positions, groups):
    each convolution case's input gradient and each transposed convolution case."""
    cases = []
    for n, c, spatial, _o, kernel, stride, padding, dilation, groups in CONV_CASES:
        out = tuple(conv_output_size(*a) for a in zip(spatial, kernel, stride, padding, dilation))
        cases.append(((n, c) + spatial, kernel, stride, tuple(lo for lo, _ in padding), dilation, out, groups))
    for n, _c, spatial, o, kernel, stride, padding, output_padding, dilation, groups in CONV_T_CASES:
        size = tuple(
            conv_transpose_output_size(m, k, st, (p, p), op, d)
            for m, k, st, p, op, d in zip(spatial, kernel, stride, padding, output_padding, dilation)
        )
        cases.append(((n, o) + size, kernel, stride, padding, dilation, spatial, groups))
    cases.append(((64, 16, 14, 14), (3, 3), (1, 1), (1, 1), (1, 1), (14, 14), 1))  # W3's conv2 input gradient
    return cases


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", _col2im_geometries(), ids=str)
def test_native_col2im_is_numpy_col2im_bit_for_bit(every_size, case, dtype, with_bias, rng):  # noqa: F811
    y_shape, kernel, stride, pad, dilation, out, groups = case
    n, c = y_shape[:2]
    rows = c // groups * int(np.prod(kernel))
    cols = rng.standard_normal((groups, rows, n * int(np.prod(out)))).astype(dtype)
    flat = cols.reshape(-1)  # special values: their sums depend on the order too
    flat[rng.choice(flat.size, 6, replace=False)] = [np.inf, -np.inf, np.nan, -0.0, 1e30, -1e30]
    bias = rng.standard_normal(c).astype(dtype) if with_bias else None
    y = np.full(y_shape, 7.0, dtype=dtype)  # every element is written
    assert native_conv.image_from_columns(cols, kernel, stride, pad, dilation, out, groups, bias, y) is y
    expected = _numpy_col2im(cols, y_shape, kernel, stride, pad, dilation, out, groups, bias)
    np.testing.assert_array_equal(y.view(np.uint8), np.ascontiguousarray(expected).view(np.uint8))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CONV_T_CASES, ids=lambda c: f"{c[2]}k{c[4]}s{c[5]}g{c[9]}")
def test_native_conv_transpose_matches_torch_and_numpy(every_size, case, dtype, monkeypatch):  # noqa: F811
    (x, w, bias, *args), expected = conv_transpose_with_bias_case(case)
    x, w, bias = x.astype(dtype), w.astype(dtype), bias.astype(dtype)
    ran = []
    original = module_ops._native_conv_transpose
    monkeypatch.setattr(module_ops, "_native_conv_transpose", lambda *a: ran.append(original(*a)) or ran[-1])
    y = FLEX.conv_transpose(x, w, bias, *args)
    assert ran and ran[0] is not None and y.dtype == dtype
    tol = 1e-5 if dtype == np.float32 else 1e-10
    assert_close(y, expected, rtol=tol, atol=tol)
    assert_close(y, numpy_only(FLEX.conv_transpose, x, w, bias, *args), rtol=tol / 10, atol=tol / 10)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[2]}k{c[4]}s{c[5]}g{c[8]}")
def test_native_conv_input_gradient_matches_torch(every_size, case, dtype, rng):  # noqa: F811
    """A convolution's input gradient: the transposed convolution autodiff calls."""
    torch = import_torch()
    n, c, spatial, o, kernel, stride, padding, dilation, groups = case
    x = rng.standard_normal((n, c) + spatial)
    w = rng.standard_normal((o, c // groups) + kernel)
    xt = torch.from_numpy(x).requires_grad_()
    ref = _torch_conv(torch, xt, torch.from_numpy(w), None, stride, padding, dilation, groups)
    g = rng.standard_normal(ref.shape)
    (gx,) = torch.autograd.grad(ref, (xt,), torch.from_numpy(g))
    output_padding = tuple(
        size - conv_transpose_output_size(out, k, s, p, 0, d)
        for size, out, k, s, p, d in zip(spatial, g.shape[2:], kernel, stride, padding, dilation)
    )
    args = (stride, padding, output_padding, dilation, groups)
    ours = FLEX.conv_transpose(g.astype(dtype), w.astype(dtype), None, *args)
    assert ours.dtype == dtype
    tol = 1e-5 if dtype == np.float32 else 1e-10
    assert_close(ours, gx.numpy(), rtol=tol, atol=tol * 10)


def test_w3_input_gradient_runs_natively_by_default_and_matches_torch(rng, monkeypatch):
    """W3's conv2 input gradient (batch 64, 32 -> 16 channels, 14x14, 3x3, padding 1),
    float32, no patching of the size threshold."""
    torch = import_torch()
    g = rng.standard_normal((64, 32, 14, 14)).astype(np.float32)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    ran = []
    original = module_ops._native_conv_transpose
    monkeypatch.setattr(module_ops, "_native_conv_transpose", lambda *a: ran.append(original(*a)) or ran[-1])
    ours = FLEX.conv_transpose(g, w, None, (1, 1), ((1, 1), (1, 1)), (0, 0), (1, 1), 1)
    assert ran and ran[0] is not None
    expected = torch.nn.functional.conv_transpose2d(
        torch.from_numpy(g.astype(np.float64)), torch.from_numpy(w.astype(np.float64)), padding=1
    ).numpy()
    assert_close(ours, expected, rtol=1e-5, atol=1e-6 * np.abs(expected).max())


def test_col2im_too_large_to_compile_quickly_takes_numpy(every_size, rng):  # noqa: F811
    """An 11x11 kernel at stride 4 (18 runs of pixels per dim: 324 loop nests) is left to
    numpy, whose transposed convolution still matches torch."""
    from ember.backend.kernel.llvm.columns import Windows, col2im_fits

    torch = import_torch()
    x = rng.standard_normal((2, 3, 5, 5))
    w = rng.standard_normal((3, 2, 11, 11))
    assert not col2im_fits(Windows(2, (27, 27), (11, 11), (5, 5), (4, 4), (0, 0), (1, 1)))
    cols = np.zeros((1, 2 * 121, 2 * 25))
    y = np.empty((2, 2, 27, 27))
    assert native_conv.image_from_columns(cols, (11, 11), (4, 4), (0, 0), (1, 1), (5, 5), 1, None, y) is None
    ours = FLEX.conv_transpose(x, w, None, (4, 4), ((0, 0), (0, 0)), (0, 0), (1, 1), 1)
    expected = torch.nn.functional.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w), stride=4).numpy()
    assert_close(ours, expected, rtol=1e-10, atol=1e-10)


def _numpy_rows(x, kernel, stride, padding, dilation, out, groups):
    """The oracle of im2row: per group, one row per (sample, output position) holding its
    window's values in (channel, kernel position) order, read from the zero-padded input."""
    n, c = x.shape[:2]
    cg = c // groups
    padded = np.pad(x, [(0, 0), (0, 0), *padding])
    rows = np.empty((groups, n, *out, cg, int(np.prod(kernel))), x.dtype)
    for t, offset in enumerate(np.ndindex(*kernel)):
        index = tuple(slice(k * d, k * d + (o - 1) * s + 1, s) for k, d, o, s in zip(offset, dilation, out, stride))
        window = padded[(slice(None), slice(None), *index)]  # [n, c, *out]
        for g in range(groups):
            rows[(g, Ellipsis, t)] = np.moveaxis(window[:, g * cg : (g + 1) * cg], 1, -1)
    return rows.reshape(groups, n * int(np.prod(out)), -1)


@pytest.mark.parametrize("extra", [0, 5])
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[2]}k{c[4]}s{c[5]}g{c[8]}")
def test_native_rows_are_the_transposed_columns_bit_for_bit(every_size, case, extra, rng):  # noqa: F811
    """im2row (the quantized convolutions' int8 rows) against numpy's sliding windows and
    against the transpose of the native columns; values past a row's end are left alone."""
    n, c, spatial, _o, kernel, stride, padding, dilation, groups = case
    x = rng.standard_normal((n, c) + spatial).astype(np.float32)
    x[0, 0, 0] = np.nan  # copied, never computed with
    out = tuple(conv_output_size(*a) for a in zip(spatial, kernel, stride, padding, dilation))
    expected = _numpy_rows(x, kernel, stride, padding, dilation, out, groups)
    width = expected.shape[-1] + extra
    dst = np.full(expected.shape[:-1] + (width,), 7.0, np.float32)
    got = native_conv.rows(x, kernel, stride, tuple(lo for lo, _ in padding), dilation, out, groups, dst)
    assert got is dst
    np.testing.assert_array_equal(dst[..., : expected.shape[-1]], expected)
    assert (dst[..., expected.shape[-1] :] == 7.0).all()
    from ember.backend.flex.module_ops import native_columns

    cols = native_columns(x, kernel, stride, padding, dilation, out, groups)
    np.testing.assert_array_equal(dst[..., : expected.shape[-1]], cols.transpose(0, 2, 1))
