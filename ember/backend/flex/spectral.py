"""flex's complex and FFT ops: pocketfft called on the arrays themselves, with no copy
in or out (the protocol's defaults copy through ``from_numpy``).

The FFTs call ``scipy.fft`` when scipy is installed (the ``fft`` extra), else
``numpy.fft``: both are pocketfft with the same signatures, but numpy's float32
transforms take as long as its float64 ones while scipy's run in float32, about twice
as fast (``benchmarks/ops.py``)."""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ember.backend.base import host_complex, host_complex_unary
from ember.backend.ops import ComplexOp, FftOp

_NAMES_1D = {FftOp.FFT: "fft", FftOp.IFFT: "ifft", FftOp.RFFT: "rfft", FftOp.IRFFT: "irfft"}


@cache
def _pocketfft() -> Any:
    """``scipy.fft`` if scipy is installed, else ``numpy.fft`` (imported on the first FFT)."""
    try:
        import scipy.fft
    except ImportError:
        return np.fft
    return scipy.fft


class FlexSpectral:
    """The ``complex_unary``, ``complex`` and ``fft`` methods of :class:`FlexBackend`."""

    __slots__ = ()

    def complex_unary(self, op: ComplexOp, x: np.ndarray) -> np.ndarray:
        return host_complex_unary(op, x)

    def complex(self, real: np.ndarray, imag: np.ndarray) -> np.ndarray:
        return host_complex(real, imag)

    def fft(self, op: FftOp, x: np.ndarray, sizes: tuple[int, ...], dims: tuple[int, ...], norm: str) -> np.ndarray:
        module = _pocketfft()
        name = _NAMES_1D[op]
        if len(dims) == 1:
            return getattr(module, name)(x, sizes[0], dims[0], norm)
        return getattr(module, name + "n")(x, sizes, dims, norm)

    def stft_frames(
        self, x: np.ndarray, window: np.ndarray | None, n_fft: int, hop: int, pad: int, pad_mode: str
    ) -> np.ndarray:
        """``torch.stft``'s framing as a strided view of the padded signal times the
        window: one pass, no index."""
        if pad:
            if pad_mode == "reflect":  # np.pad's general path costs more than the copy
                x = np.concatenate([x[..., pad:0:-1], x, x[..., -2 : -pad - 2 : -1]], axis=-1)
            else:
                x = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode=_NP_PAD_MODE[pad_mode])
        x = np.ascontiguousarray(x)
        count = 1 + (x.shape[-1] - n_fft) // hop
        step = x.strides[-1]
        frames = as_strided(x, x.shape[:-1] + (count, n_fft), x.strides[:-1] + (hop * step, step), writeable=False)
        if window is None:
            return np.ascontiguousarray(frames)
        return np.multiply(frames, window, dtype=np.result_type(x, window))


_NP_PAD_MODE: dict[str, Any] = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}
