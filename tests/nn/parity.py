"""Helpers shared by the tests of ``tests/nn``: seeded inputs, ember and torch twins of
one array, the same weighted-sum loss on both sides, and gradient comparison."""

from __future__ import annotations

from typing import Any

import numpy as np

from ember import Device, Param, Tensor
from ember.nn import Linear
from tests.conftest import assert_close


def rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """Standard-normal float32 values of ``shape`` drawn from ``rng`` (the test's seeded
    ``rng`` fixture)."""
    return rng.standard_normal(shape).astype(np.float32)


def autodiff_of(device: Device) -> Device:
    """``device`` itself when it tracks gradients, else its autodiff wrapper."""
    return device if device.is_autodiff() else device.autodiff()


def param(array: np.ndarray, device: Device) -> Param:
    return Param.from_tensor(Tensor.from_data(np.ascontiguousarray(array), device=device))


def torch_linear(weight: Any, bias: Any, device: Device) -> Linear:
    """An ember ``Linear`` holding a torch weight (``[out, in]``, transposed to ember's
    ``[in, out]``) and bias."""
    return Linear(weight=param(weight.detach().numpy().T, device), bias=param(bias.detach().numpy(), device))


def leaf(array: np.ndarray, device: Device) -> Tensor:
    """An input tensor that requires grad (on an autodiff device)."""
    return Tensor.from_data(np.ascontiguousarray(array), device=device).require_grad()


def weighted_backward(out: Tensor, torch_out: Any, seed: int = 0) -> Any:
    """Backward of ``sum(out * w)`` on both sides for one random ``w``; returns ember's
    gradients (torch's land in ``.grad``)."""
    torch = __import__("torch")
    w = np.random.default_rng(seed).uniform(0.5, 1.5, size=tuple(torch_out.shape))
    grads = out.mul(Tensor.from_data(w.astype(out.to_numpy().dtype), device=out.device)).sum().backward()
    (torch_out * torch.from_numpy(w).to(torch_out.dtype)).sum().backward()
    return grads


def assert_grad(tensor: Tensor, grads: Any, torch_tensor: Any, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """ember's gradient of ``tensor`` equals torch's ``.grad`` (layouts already matched)."""
    g = tensor.grad(grads)
    assert g is not None, "no gradient"
    assert_close(g, torch_tensor.grad.detach().numpy(), rtol=rtol, atol=atol)


def check_layer(
    ours: Any,
    theirs: Any,
    x: np.ndarray,
    device: Device,
    *,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    grad_rtol: float = 1e-3,
    grad_atol: float = 1e-4,
    plain: bool = False,
    seed: int = 0,
) -> Any:
    """``ours`` (an ember layer or function) against ``theirs`` (its torch twin) on ``x``:
    the output on ``device``'s autodiff form (and on ``device`` itself with ``plain``, for
    layers without parameters), then the input's gradient of one weighted sum
    (:func:`weighted_backward`). Returns ember's gradients, for the parameters' checks
    (torch's are in ``.grad``)."""
    tx = to_torch(x, True)
    ref = theirs(tx)
    expected = ref.detach().numpy()
    if plain:
        assert_close(ours(Tensor.from_data(x, device=device)), expected, rtol=rtol, atol=atol)
    ex = leaf(x, autodiff_of(device))
    out = ours(ex)
    assert_close(out, expected, rtol=rtol, atol=atol)
    grads = weighted_backward(out, ref, seed)
    assert_grad(ex, grads, tx, rtol=grad_rtol, atol=grad_atol)
    return grads


def to_torch(array: np.ndarray, grad: bool = False) -> Any:
    """A torch tensor sharing ``array``'s memory, optionally requiring grad."""
    torch = __import__("torch")
    t = torch.from_numpy(np.ascontiguousarray(array))
    return t.requires_grad_(grad)
