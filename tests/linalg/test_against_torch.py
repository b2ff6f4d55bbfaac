"""``ember.linalg`` against ``torch.linalg``: values on every device of the conformance
suite, gradients on every autodiff device, finite differences and second derivatives
in float64."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from tests.autodiff.gradcheck import check_grad
from tests.autodiff.second_order import ember_hvp, numeric_hvp, torch_hvp
from tests.conftest import float64_supported, make_device
from tests.linalg.cases import CASES, NOT_DIFFERENTIABLE, SECOND_ORDER

AUTODIFF_DEVICES = ["flex+autodiff", "flex+fusion+autodiff", "cube+autodiff"]


def _inputs(arrays, device, dtype, require_grad=False):
    out = []
    for a in arrays:
        t = Tensor.from_data(a.astype(dtype), device=device)
        out.append(t.require_grad() if require_grad else t)
    return out


def _tolerance(dtype):
    return (1e-9, 1e-10) if dtype == np.float64 else (2e-4, 2e-5)


def _torch_value(torch, name, arrays, dtype, require_grad=False):
    _, torch_fn, _ = CASES[name]
    ts = [torch.tensor(a.astype(dtype), requires_grad=require_grad) for a in arrays]
    return ts, torch_fn(torch, *ts)


def test_every_function_has_a_case():
    """Each public ember.linalg function is differentiated in CASES (or listed as not
    differentiable, as in torch)."""
    import ember.linalg

    functions = {n for n in ember.linalg.__all__ if n[0].islower()}
    covered = {name for name in CASES if name in functions} | {n for n in functions for c in CASES if c.startswith(n)}
    assert functions - NOT_DIFFERENTIABLE <= covered, sorted(functions - NOT_DIFFERENTIABLE - covered)


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(CASES))
def test_values_match_torch(device, name, torch):
    fn, _, arrays = CASES[name]
    dtype = np.float64 if float64_supported(device) else np.float32
    ours = fn(*_inputs(arrays, device, dtype)).to_numpy()
    _, theirs = _torch_value(torch, name, arrays, np.float64)
    rtol, atol = _tolerance(dtype)
    np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=rtol * 10, atol=atol * 10)


@pytest.mark.torch
@pytest.mark.parametrize("device_name", AUTODIFF_DEVICES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_match_torch(device_name, name, torch):
    device = make_device(device_name)
    fn, _, arrays = CASES[name]
    dtype = np.float64 if float64_supported(device) else np.float32
    xs = _inputs(arrays, device, dtype, require_grad=True)
    out = fn(*xs)
    weights = np.random.default_rng(0).uniform(0.5, 1.5, size=tuple(out.dims()))
    grads = out.mul(Tensor.from_data(weights.astype(dtype), device=device)).sum().backward()
    ts, theirs = _torch_value(torch, name, arrays, np.float64, require_grad=True)
    # create_graph=True: PyTorch's first-order det backward gives 0 at a singular matrix
    # (its graph-building path, like ours and the finite differences, gives the adjugate).
    expected = torch.autograd.grad((theirs * torch.tensor(weights)).sum(), ts, create_graph=True)
    rtol, atol = _tolerance(dtype)
    for i, (x, e) in enumerate(zip(xs, expected)):
        g = x.grad(grads)
        assert g is not None, f"{name}: input {i} has no gradient"
        np.testing.assert_allclose(
            g.to_numpy(), e.detach().numpy(), rtol=rtol * 100, atol=atol * 100, err_msg=f"input {i}"
        )


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_match_finite_differences(name):
    fn, _, arrays = CASES[name]
    check_grad(fn, [a.astype(np.float64) for a in arrays], eps=1e-6, rtol=1e-5, atol=1e-7)


@pytest.mark.torch
@pytest.mark.parametrize("name", SECOND_ORDER)
def test_second_derivatives_match_torch(name, torch):
    fn, torch_fn, arrays = CASES[name]
    wrt = list(range(len(arrays)))
    ours = ember_hvp(fn, arrays, wrt)
    out_shape = fn(*[Tensor.from_data(a, device=Device.flex()) for a in arrays]).dims()
    theirs = torch_hvp(torch, torch_fn, arrays, wrt, out_shape)
    for i in wrt:
        np.testing.assert_allclose(ours[i], theirs[i], rtol=1e-7, atol=1e-9, err_msg=f"{name}: input {i}")


@pytest.mark.parametrize("name", ["inv", "det", "cholesky", "svdvals", "eigh", "matrix_exp"])
def test_second_derivatives_match_finite_differences(name):
    fn, _, arrays = CASES[name]
    wrt = list(range(len(arrays)))
    ours = ember_hvp(fn, arrays, wrt)
    numeric = numeric_hvp(fn, arrays, wrt, eps=1e-5)
    for i in wrt:
        np.testing.assert_allclose(ours[i], numeric[i], rtol=1e-4, atol=1e-6, err_msg=f"{name}: input {i}")
