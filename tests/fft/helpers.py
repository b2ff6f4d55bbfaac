"""Shared helpers of the complex and FFT tests: which devices hold complex tensors, and
gradients of complex inputs by central differences."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import DTypeError


def holds_complex(device: Device) -> bool:
    """True where the device holds complex tensors. On cube this checks the documented
    behaviour instead (a DTypeError that names flex) and returns False, so the caller
    ends the test there (a pass, not a skip)."""
    if device.backend_name not in ("cube", "cuda"):
        return True
    with pytest.raises(DTypeError, match="flex"):
        Tensor.from_data(np.zeros(2, np.complex64), device=device)
    return False


def assert_complex_close(actual, expected, rtol=1e-5, atol=1e-6) -> None:
    a = np.asarray(actual.to_numpy() if hasattr(actual, "to_numpy") else actual)
    e = np.asarray(expected)
    assert a.shape == e.shape, f"shape {a.shape} != expected {e.shape}"
    np.testing.assert_allclose(a.astype(np.complex128), e.astype(np.complex128), rtol=rtol, atol=atol)


def numeric_grad(loss: Callable[[np.ndarray], float], x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """``dL/dRe + i dL/dIm`` (PyTorch's convention for a complex input; the plain
    derivative for a real one) by central differences of the real ``loss``."""
    grad = np.zeros(x.shape, dtype=x.dtype)
    flat = grad.reshape(-1)
    parts = (1.0, 1j) if x.dtype.kind == "c" else (1.0,)
    for j in range(x.size):
        for unit in parts:
            plus, minus = x.copy(), x.copy()
            plus.reshape(-1)[j] += eps * unit
            minus.reshape(-1)[j] -= eps * unit
            flat[j] += unit * (loss(plus) - loss(minus)) / (2 * eps)
    return grad


def real_loss(out: Tensor, weights: np.ndarray) -> Tensor:
    """A real scalar of a real or complex output: ``sum(Re(out) w + Im(out) w^2)``."""
    w = Tensor.from_data(weights, device=out.device)
    if out.is_complex():
        return out.real().mul(w).sum().add(out.imag().mul(w.mul(w)).sum())
    return out.mul(w).sum()
