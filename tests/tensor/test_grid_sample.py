"""``grid_sample`` and ``affine_grid`` against PyTorch: values and the gradients for
the input and the grid, every mode, padding mode and ``align_corners``, 4-D and 5-D,
on every device (flex's kernels, the composite elsewhere)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ember import Tensor
from ember.errors import DTypeError, ShapeError, ValueRangeError
from ember.nn.functional import affine_grid, grid_sample

CASES = list(itertools.product(("bilinear", "nearest"), ("zeros", "border", "reflection"), (False, True)))
# Every mode and padding mode, align_corners alternating (all of CASES run in float64 on flex below).
SOME = CASES[::2] + [("bilinear", "zeros", True), ("bilinear", "reflection", False)]


def _run(device, torch, x, grid, mode, padding, align):
    tx = torch.tensor(x, requires_grad=True)
    tg = torch.tensor(grid, requires_grad=True)
    ty = torch.nn.functional.grid_sample(tx, tg, mode=mode, padding_mode=padding, align_corners=align)
    seed = np.cos(np.arange(ty.numel(), dtype=np.float32)).reshape(tuple(ty.shape))
    ty.backward(torch.tensor(seed))
    ex = Tensor.from_data(x, device=device).require_grad()
    eg = Tensor.from_data(grid, device=device).require_grad()
    ey = grid_sample(ex, eg, mode=mode, padding_mode=padding, align_corners=align)
    np.testing.assert_allclose(ey.to_numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-5)
    if not device.is_autodiff():
        return
    grads = ey.mul(Tensor.from_data(seed, device=device)).sum().backward()
    np.testing.assert_allclose(ex.grad(grads).to_numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    g_grid = eg.grad(grads)  # None where the grid does not reach the output (nearest on the composite)
    g_grid = np.zeros_like(grid) if g_grid is None else g_grid.to_numpy()
    np.testing.assert_allclose(g_grid, tg.grad.numpy(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("mode,padding,align", SOME)
def test_grid_sample_2d_matches_torch(device, torch, rng, mode, padding, align):
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    grid = rng.uniform(-1.3, 1.3, (2, 4, 3, 2)).astype(np.float32)
    _run(device, torch, x, grid, mode, padding, align)


@pytest.mark.parametrize(
    "mode,padding,align", [("bilinear", "zeros", False), ("bilinear", "reflection", True), ("nearest", "border", False)]
)
def test_grid_sample_3d_matches_torch(device, torch, rng, mode, padding, align):
    x = rng.standard_normal((2, 2, 4, 5, 3)).astype(np.float32)
    grid = rng.uniform(-1.3, 1.3, (2, 2, 3, 4, 3)).astype(np.float32)
    _run(device, torch, x, grid, mode, padding, align)


def test_grid_sample_float64_and_special_points(flex, torch, rng):
    x = np.arange(12, dtype=np.float64).reshape(1, 1, 3, 4)
    # the corners, the exact edges, points far outside, and a NaN
    pts = [[-1.0, -1.0], [1.0, 1.0], [1.0, -1.0], [5.0, 0.2], [-7.5, 3.0], [0.5, 0.25], [float("nan"), 0.0]]
    grid = np.array(pts, dtype=np.float64).reshape(1, 1, len(pts), 2)
    for mode, padding, align in CASES:
        tx = torch.tensor(x)
        ty = torch.nn.functional.grid_sample(
            tx, torch.tensor(grid), mode=mode, padding_mode=padding, align_corners=align
        )
        ey = grid_sample(Tensor.from_data(x, device=flex), Tensor.from_data(grid, device=flex), mode, padding, align)
        assert ey.dtype.name == "FLOAT64"
        np.testing.assert_allclose(ey.to_numpy(), ty.numpy(), rtol=1e-12, atol=1e-12)
    # the gradients in float64, every case
    x = rng.standard_normal((2, 3, 5, 6))
    grid = rng.uniform(-1.3, 1.3, (2, 4, 3, 2))
    for mode, padding, align in CASES:
        _run(flex.autodiff(), torch, x, grid, mode, padding, align)


@pytest.mark.parametrize("align", (False, True))
@pytest.mark.parametrize("size", ([2, 3, 4, 5], [1, 2, 3, 4, 2]))
def test_affine_grid_matches_torch_with_gradient(device, torch, rng, size, align):
    rank = len(size) - 2
    theta = rng.standard_normal((size[0], rank, rank + 1)).astype(np.float32)
    tt = torch.tensor(theta, requires_grad=True)
    tg = torch.nn.functional.affine_grid(tt, size, align_corners=align)
    seed = np.sin(np.arange(tg.numel(), dtype=np.float32)).reshape(tuple(tg.shape))
    tg.backward(torch.tensor(seed))
    et = Tensor.from_data(theta, device=device).require_grad()
    eg = affine_grid(et, size, align_corners=align)
    np.testing.assert_allclose(eg.to_numpy(), tg.detach().numpy(), rtol=1e-5, atol=1e-5)
    if device.is_autodiff():
        grads = eg.mul(Tensor.from_data(seed, device=device)).sum().backward()
        np.testing.assert_allclose(et.grad(grads).to_numpy(), tt.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_grid_sample_errors(flex):
    x = Tensor.zeros([1, 1, 4, 4], device=flex)
    g = Tensor.zeros([1, 2, 2, 2], device=flex)
    with pytest.raises(ValueRangeError, match="bicubic is not implemented"):
        grid_sample(x, g, mode="bicubic")
    with pytest.raises(ValueRangeError, match="padding_mode"):
        grid_sample(x, g, padding_mode="wrap")
    with pytest.raises(ShapeError, match=r"grid \[1, 2, 2, 3\]"):
        grid_sample(x, Tensor.zeros([1, 2, 2, 3], device=flex))
    with pytest.raises(DTypeError, match="one dtype"):
        grid_sample(x, g.cast("float64"))
    with pytest.raises(ShapeError, match="affine_grid"):
        affine_grid(Tensor.zeros([1, 2, 3], device=flex), [1, 1, 4, 4, 4])


@pytest.fixture(params=["native", "numpy"])
def flex_paths(request, monkeypatch):
    """flex's native (LLVM) grid_sample kernels, then its numpy versions."""
    from ember.backend.flex import native, native_grid

    if request.param == "numpy":
        monkeypatch.setitem(native_grid._STATE, "off", True)
    elif native_grid.kernels() is None:
        pytest.skip("native kernels are unavailable on this machine")
    else:
        monkeypatch.setattr(native, "MIN_ELEMENTS", 0)  # small arrays take the native path too
    return request.param


@pytest.mark.parametrize("mode,padding,align", CASES)
def test_grid_sample_native_and_numpy_kernels_match_torch(flex_paths, flex, torch, rng, mode, padding, align):
    """Both flex kernels (float32), 2-D and 3-D, values and both gradients, against torch."""
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    grid = rng.uniform(-1.3, 1.3, (2, 4, 3, 2)).astype(np.float32)
    _run(flex.autodiff(), torch, x, grid, mode, padding, align)
    x3 = rng.standard_normal((2, 2, 4, 5, 3)).astype(np.float32)
    grid3 = rng.uniform(-1.3, 1.3, (2, 2, 3, 4, 3)).astype(np.float32)
    _run(flex.autodiff(), torch, x3, grid3, mode, padding, align)


def test_grid_sample_native_kernels_equal_numpy_bits(flex, rng, monkeypatch):
    """The native forward sums the same corners in the same order as numpy: same bits;
    the gradients within float32 rounding (the scatter's order differs)."""
    from ember.backend.flex import grid_sample as kernels
    from ember.backend.flex import native_grid

    if native_grid.kernels() is None:
        pytest.skip("native kernels are unavailable on this machine")
    x = rng.standard_normal((2, 4, 40, 50)).astype(np.float32)
    grid = rng.uniform(-1.2, 1.2, (2, 30, 40, 2)).astype(np.float32)
    grid[0, 0, 0] = np.nan
    g = rng.standard_normal((2, 4, 30, 40)).astype(np.float32)
    for mode in ("bilinear", "nearest"):
        native = kernels.grid_sample(x, grid, mode, "zeros", False)
        native_grads = kernels.grid_sample_backward(g, x, grid, mode, "zeros", False, True, True)
        with monkeypatch.context() as m:
            m.setitem(native_grid._STATE, "off", True)
            plain = kernels.grid_sample(x, grid, mode, "zeros", False)
            plain_grads = kernels.grid_sample_backward(g, x, grid, mode, "zeros", False, True, True)
        np.testing.assert_array_equal(native, plain)
        for a, b in zip(native_grads, plain_grads):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
