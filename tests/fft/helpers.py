"""Shared helpers of the complex and FFT tests: which devices hold complex tensors, and
gradients of complex inputs by central differences."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import DTypeError


def holds_complex(device: Device) -> bool:
    """True where the device holds complex tensors (every device but cuda, which skips
    anyway without a GPU)."""
    return device.backend_name != "cuda"


def complex_dtype(device: Device) -> type:
    """complex128 where the device holds it; on cube (no 64-bit floats on the GPU) this
    checks the documented error for complex128 and gives complex64."""
    if device.backend_name != "cube":
        return np.complex128
    with pytest.raises(DTypeError, match="complex64"):
        Tensor.from_data(np.zeros(2, np.complex128), device=device)
    return np.complex64


def tolerance(dtype: type) -> dict[str, float]:
    """rtol and atol for results of ``dtype`` against a float64 oracle."""
    return {"rtol": 1e-9, "atol": 1e-10} if np.dtype(dtype) == np.complex128 else {"rtol": 2e-5, "atol": 2e-5}


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
