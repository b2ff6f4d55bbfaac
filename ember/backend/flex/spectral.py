"""flex's complex and FFT ops: numpy (pocketfft) called on the arrays themselves, with
no copy in or out (the protocol's defaults copy through ``from_numpy``)."""

from __future__ import annotations

import numpy as np

from ember.backend.base import host_complex, host_complex_unary, host_fft
from ember.backend.ops import ComplexOp, FftOp


class FlexSpectral:
    """The ``complex_unary``, ``complex`` and ``fft`` methods of :class:`FlexBackend`."""

    __slots__ = ()

    def complex_unary(self, op: ComplexOp, x: np.ndarray) -> np.ndarray:
        return host_complex_unary(op, x)

    def complex(self, real: np.ndarray, imag: np.ndarray) -> np.ndarray:
        return host_complex(real, imag)

    def fft(self, op: FftOp, x: np.ndarray, sizes: tuple[int, ...], dims: tuple[int, ...], norm: str) -> np.ndarray:
        return host_fft(op, x, sizes, dims, norm)
