"""Window functions with PyTorch's names and conventions (``torch.hann_window``...).

``periodic=True`` (the default, as PyTorch) gives the window for spectral analysis: the
first ``window_length`` points of the symmetric window of ``window_length + 1``;
``periodic=False`` gives the symmetric window (``numpy.hanning``'s). The values are
computed in float64 on the host and held as ``dtype`` (float32 by default).

>>> import ember
>>> [round(v, 4) for v in ember.hann_window(4).tolist()]
[0.0, 0.5, 1.0, 0.5]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.backend.dtype import DType
from ember.device import Device
from ember.errors import DTypeError, ValueRangeError
from ember.tensor.tensor import Tensor


def _window(name: str, length: int, periodic: bool, dtype: Any, device: Device | None, fn: Any) -> Tensor:
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
        raise ValueRangeError(f"ember: {name}: window_length must be an int >= 0, got {length!r}")
    out = DType.FLOAT32 if dtype is None else DType.parse(dtype)
    if not out.is_float:
        raise DTypeError(f"ember: {name}: dtype must be a float dtype, got {out}")
    length = int(length)
    if length <= 1:
        values = np.ones(length)
    else:
        n = length + 1 if periodic else length
        values = fn(np.arange(n, dtype=np.float64), n - 1)[:length]
    return Tensor.from_data(values.astype(out.np), device=device)


def _cosine_sum(*coefficients: float) -> Any:
    def fn(k: np.ndarray, m: int) -> np.ndarray:
        return sum((-1) ** i * a * np.cos(2 * np.pi * i * k / m) for i, a in enumerate(coefficients))

    return fn


def hann_window(
    window_length: int, periodic: bool = True, *, dtype: DType | str | None = None, device: Device | None = None
) -> Tensor:
    """``0.5 - 0.5 cos(2 pi k / N)`` (``torch.hann_window``)."""
    return _window("hann_window", window_length, periodic, dtype, device, _cosine_sum(0.5, 0.5))


def hamming_window(
    window_length: int,
    periodic: bool = True,
    alpha: float = 0.54,
    beta: float = 0.46,
    *,
    dtype: DType | str | None = None,
    device: Device | None = None,
) -> Tensor:
    """``alpha - beta cos(2 pi k / N)`` (``torch.hamming_window``)."""
    return _window("hamming_window", window_length, periodic, dtype, device, _cosine_sum(alpha, beta))


def blackman_window(
    window_length: int, periodic: bool = True, *, dtype: DType | str | None = None, device: Device | None = None
) -> Tensor:
    """``0.42 - 0.5 cos(2 pi k / N) + 0.08 cos(4 pi k / N)`` (``torch.blackman_window``)."""
    return _window("blackman_window", window_length, periodic, dtype, device, _cosine_sum(0.42, 0.5, 0.08))


def kaiser_window(
    window_length: int,
    periodic: bool = True,
    beta: float = 12.0,
    *,
    dtype: DType | str | None = None,
    device: Device | None = None,
) -> Tensor:
    """``I0(beta sqrt(1 - (2k/N - 1)^2)) / I0(beta)`` (``torch.kaiser_window``)."""

    def fn(k: np.ndarray, m: int) -> np.ndarray:
        return np.i0(beta * np.sqrt(np.clip(1 - (2 * k / m - 1) ** 2, 0, None))) / np.i0(beta)

    return _window("kaiser_window", window_length, periodic, dtype, device, fn)


__all__ = ["blackman_window", "hamming_window", "hann_window", "kaiser_window"]
