"""Discrete Fourier transforms with ``torch.fft``'s names and signatures (``ember.fft``).

``fft``/``ifft`` (complex to complex), ``rfft``/``irfft`` (real signal, the
non-negative half of its spectrum), ``hfft``/``ihfft`` (a Hermitian-symmetric signal),
their 2-d and n-d forms, ``fftshift``/``ifftshift`` and ``fftfreq``/``rfftfreq``.
``n``/``s`` crop or zero-pad each transformed dim to the signal length first;
``norm`` scales as in PyTorch and numpy: ``"backward"`` (default: the inverse divides
by ``n``), ``"ortho"`` (both by ``sqrt(n)``), ``"forward"`` (the forward divides by ``n``).
float32 (and the half types) give complex64, float64 complex128; ints count as float32.

On flex each transform is one call of numpy's pocketfft on the array; on cube the
transforms are WGSL kernels in complex64 (``ember.backend.cube.kernels.fft``: radix-2
Stockham passes, Bluestein's algorithm for other lengths). Gradients flow through every
transform (the adjoint transform, PyTorch's conventions).

>>> import ember
>>> from ember import Tensor
>>> x = Tensor.from_floats([1.0, 2.0, 3.0, 4.0])
>>> ember.fft.rfft(x).tolist()
[(10+0j), (-2+2j), (-2+0j)]
>>> ember.fft.irfft(ember.fft.rfft(x), n=4).tolist()
[1.0, 2.0, 3.0, 4.0]
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.backend.dtype import DType
from ember.backend.ops import FftOp
from ember.device import Device
from ember.errors import DTypeError, ShapeError, ValueRangeError
from ember.tensor.shape import normalize_dim
from ember.tensor.tensor import Tensor

_NORMS = ("backward", "ortho", "forward")
_DUAL = {"backward": "forward", "forward": "backward", "ortho": "ortho"}
_C64, _C128 = np.dtype(np.complex64), np.dtype(np.complex128)
_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)

Dims = int | Sequence[int] | None
Sizes = int | Sequence[int] | None


def _norm(name: str, norm: str | None) -> str:
    if norm is None:
        return "backward"
    if norm not in _NORMS:
        raise ValueRangeError(f"ember: fft.{name}: norm must be one of {', '.join(_NORMS)} or None, got {norm!r}")
    return norm


def _as_complex(name: str, x: Tensor) -> Tensor:
    dt = x._primitive.dtype
    if dt in (_C64, _C128):
        return x
    return x.cast(DType.COMPLEX128 if dt == _F64 else DType.COMPLEX64)


def _as_real(name: str, x: Tensor) -> Tensor:
    dt = x._primitive.dtype
    if dt in (_F32, _F64):
        return x
    if dt.kind == "c":
        raise DTypeError(
            f"ember: fft.{name}: expects a real input tensor, got {x.dtype} (shape {list(x.shape)}); "
            "use fft.fft for complex signals"
        )
    return x.cast(DType.FLOAT32)


def _check_tensor(name: str, x: Any) -> Tensor:
    if not isinstance(x, Tensor):
        raise DTypeError(f"ember: fft.{name}: expected a Tensor, got {type(x).__name__}")
    if x.rank == 0:
        raise ShapeError(f"ember: fft.{name}: needs a tensor of rank >= 1, got a rank-0 tensor")
    return x


def _plan(name: str, x: Tensor, s: Sizes, dim: Dims, default_all: bool) -> tuple[tuple[int, ...], list[int | None]]:
    """The transformed dims (non-negative, in order) and their requested sizes (``None``:
    the input's). ``s`` without ``dim`` means the last ``len(s)`` dims (as PyTorch)."""
    rank = x.rank
    if isinstance(s, (int, np.integer)) or s is None:
        sizes_in: list[Any] | None = None if s is None else [s]
    else:
        sizes_in = list(s)
    if dim is None:
        if sizes_in is not None:
            dims_in = list(range(rank - len(sizes_in), rank))
        else:
            dims_in = list(range(rank)) if default_all else [rank - 1]
    elif isinstance(dim, (int, np.integer)):
        dims_in = [int(dim)]
    else:
        dims_in = [int(d) for d in dim]
    dims = tuple(normalize_dim(f"fft.{name}", d, rank) for d in dims_in)
    if len(set(dims)) != len(dims):
        raise ShapeError(f"ember: fft.{name}: dims must be distinct, got {dims_in}")
    if sizes_in is not None and len(sizes_in) != len(dims):
        raise ShapeError(
            f"ember: fft.{name}: s has {len(sizes_in)} sizes for {len(dims)} dims {dims_in}; give one size per dim"
        )
    if not dims:
        raise ShapeError(f"ember: fft.{name}: no dims to transform")
    sizes = [None if v is None or v == -1 else int(v) for v in (sizes_in or [None] * len(dims))]
    for v in sizes:
        if v is not None and v < 1:
            raise ValueRangeError(f"ember: fft.{name}: signal sizes must be >= 1 (or -1: keep the input's), got {v}")
    return dims, sizes


def _run(name: str, op: FftOp, x: Tensor, dims: tuple[int, ...], sizes: tuple[int, ...], norm: str) -> Tensor:
    for d, n in zip(dims, sizes):
        if n < 1:
            raise ShapeError(
                f"ember: fft.{name}: dim {d} of shape {list(x.shape)} gives a signal of {n} points; needs >= 1"
            )
    return Tensor(x._device._backend.fft(op, x._primitive, sizes, dims, norm), x._device)


def _c2c(name: str, op: FftOp, x: Any, s: Sizes, dim: Dims, norm: str | None, default_all: bool) -> Tensor:
    x = _check_tensor(name, x)
    dims, sizes = _plan(name, x, s, dim, default_all)
    full = tuple(x.shape[d] if v is None else v for d, v in zip(dims, sizes))
    return _run(name, op, _as_complex(name, x), dims, full, _norm(name, norm))


def _r2c(name: str, x: Any, s: Sizes, dim: Dims, norm: str | None, default_all: bool) -> Tensor:
    x = _check_tensor(name, x)
    dims, sizes = _plan(name, x, s, dim, default_all)
    full = tuple(x.shape[d] if v is None else v for d, v in zip(dims, sizes))
    return _run(name, FftOp.RFFT, _as_real(name, x), dims, full, _norm(name, norm))


def _c2r(name: str, x: Any, s: Sizes, dim: Dims, norm: str | None, default_all: bool) -> Tensor:
    x = _check_tensor(name, x)
    dims, sizes = _plan(name, x, s, dim, default_all)
    full = [x.shape[d] if v is None else v for d, v in zip(dims, sizes)]
    if sizes[-1] is None:
        full[-1] = 2 * (x.shape[dims[-1]] - 1)
    return _run(name, FftOp.IRFFT, _as_complex(name, x), dims, tuple(full), _norm(name, norm))


# ---------------------------------------------------------------------- 1-d
def fft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    """The 1-d discrete Fourier transform along ``dim`` (``torch.fft.fft``); a real input
    is taken as complex."""
    return _c2c("fft", FftOp.FFT, input, n, dim, norm, False)


def ifft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    """The inverse of :func:`fft` (``torch.fft.ifft``)."""
    return _c2c("ifft", FftOp.IFFT, input, n, dim, norm, False)


def rfft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    """The FFT of a real signal: its ``n // 2 + 1`` non-negative frequencies (``torch.fft.rfft``)."""
    return _r2c("rfft", input, n, dim, norm, False)


def irfft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    """The inverse of :func:`rfft`: a real signal of length ``n`` (default
    ``2 * (m - 1)`` for ``m`` input bins) from the half spectrum (``torch.fft.irfft``)."""
    return _c2r("irfft", input, n, dim, norm, False)


def hfft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    """The FFT of a Hermitian-symmetric signal given by its first half: a real spectrum
    of length ``n`` (``torch.fft.hfft``; ``irfft(conj(x))`` with the dual scaling)."""
    x = _check_tensor("hfft", input)
    return irfft(_as_complex("hfft", x).conj(), n, dim, _DUAL[_norm("hfft", norm)])


def ihfft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    """The inverse of :func:`hfft`: the half of a Hermitian signal from a real spectrum
    (``torch.fft.ihfft``; ``conj(rfft(x))`` with the dual scaling)."""
    return rfft(input, n, dim, _DUAL[_norm("ihfft", norm)]).conj()


# ---------------------------------------------------------------------- 2-d and n-d
def fft2(input: Tensor, s: Sizes = None, dim: Dims = (-2, -1), norm: str | None = None) -> Tensor:
    """:func:`fftn` over the last two dims (``torch.fft.fft2``)."""
    return _c2c("fft2", FftOp.FFT, input, s, dim, norm, True)


def ifft2(input: Tensor, s: Sizes = None, dim: Dims = (-2, -1), norm: str | None = None) -> Tensor:
    """:func:`ifftn` over the last two dims (``torch.fft.ifft2``)."""
    return _c2c("ifft2", FftOp.IFFT, input, s, dim, norm, True)


def rfft2(input: Tensor, s: Sizes = None, dim: Dims = (-2, -1), norm: str | None = None) -> Tensor:
    """:func:`rfftn` over the last two dims (``torch.fft.rfft2``)."""
    return _r2c("rfft2", input, s, dim, norm, True)


def irfft2(input: Tensor, s: Sizes = None, dim: Dims = (-2, -1), norm: str | None = None) -> Tensor:
    """:func:`irfftn` over the last two dims (``torch.fft.irfft2``)."""
    return _c2r("irfft2", input, s, dim, norm, True)


def fftn(input: Tensor, s: Sizes = None, dim: Dims = None, norm: str | None = None) -> Tensor:
    """The n-d FFT over ``dim`` (default: the last ``len(s)`` dims, or all) (``torch.fft.fftn``)."""
    return _c2c("fftn", FftOp.FFT, input, s, dim, norm, True)


def ifftn(input: Tensor, s: Sizes = None, dim: Dims = None, norm: str | None = None) -> Tensor:
    """The inverse of :func:`fftn` (``torch.fft.ifftn``)."""
    return _c2c("ifftn", FftOp.IFFT, input, s, dim, norm, True)


def rfftn(input: Tensor, s: Sizes = None, dim: Dims = None, norm: str | None = None) -> Tensor:
    """The n-d FFT of a real signal, halved along the last transformed dim (``torch.fft.rfftn``)."""
    return _r2c("rfftn", input, s, dim, norm, True)


def irfftn(input: Tensor, s: Sizes = None, dim: Dims = None, norm: str | None = None) -> Tensor:
    """The inverse of :func:`rfftn`; the last output size defaults to ``2 * (m - 1)``
    (``torch.fft.irfftn``)."""
    return _c2r("irfftn", input, s, dim, norm, True)


# ---------------------------------------------------------------------- helpers
def _shift_dims(name: str, x: Tensor, dim: Dims) -> list[int]:
    if dim is None:
        return list(range(x.rank))
    dims = [dim] if isinstance(dim, (int, np.integer)) else list(dim)
    return [normalize_dim(f"fft.{name}", int(d), x.rank) for d in dims]


def fftshift(input: Tensor, dim: Dims = None) -> Tensor:
    """The zero frequency moved to the centre of ``dim`` (default: every dim) (``torch.fft.fftshift``)."""
    dims = _shift_dims("fftshift", input, dim)
    return input.roll([input.shape[d] // 2 for d in dims], dims) if dims else input


def ifftshift(input: Tensor, dim: Dims = None) -> Tensor:
    """The inverse of :func:`fftshift` (``torch.fft.ifftshift``)."""
    dims = _shift_dims("ifftshift", input, dim)
    return input.roll([-(input.shape[d] // 2) for d in dims], dims) if dims else input


def _freq_dtype(name: str, dtype: DType | str | None) -> DType:
    out = DType.FLOAT32 if dtype is None else DType.parse(dtype)
    if not out.is_float:
        raise DTypeError(f"ember: fft.{name}: dtype must be a float dtype, got {out}")
    return out


def fftfreq(
    n: builtins.int, d: builtins.float = 1.0, *, dtype: DType | str | None = None, device: Device | None = None
) -> Tensor:
    """The sample frequencies of an ``n``-point FFT with sample spacing ``d``:
    ``[0, 1, ..., n//2 - 1 (or (n-1)//2), -n//2, ..., -1] / (d n)`` (``torch.fft.fftfreq``)."""
    out = _freq_dtype("fftfreq", dtype)
    if n < 1:
        raise ValueRangeError(f"ember: fft.fftfreq: n must be >= 1, got {n}")
    return Tensor.from_data(np.fft.fftfreq(n, d).astype(out.np), device=device)


def rfftfreq(
    n: builtins.int, d: builtins.float = 1.0, *, dtype: DType | str | None = None, device: Device | None = None
) -> Tensor:
    """The ``n // 2 + 1`` non-negative frequencies of :func:`rfft` (``torch.fft.rfftfreq``)."""
    out = _freq_dtype("rfftfreq", dtype)
    if n < 1:
        raise ValueRangeError(f"ember: fft.rfftfreq: n must be >= 1, got {n}")
    return Tensor.from_data(np.fft.rfftfreq(n, d).astype(out.np), device=device)


__all__ = [
    "fft",
    "fft2",
    "fftfreq",
    "fftn",
    "fftshift",
    "hfft",
    "ifft",
    "ifft2",
    "ifftn",
    "ifftshift",
    "ihfft",
    "irfft",
    "irfft2",
    "irfftn",
    "rfft",
    "rfft2",
    "rfftfreq",
    "rfftn",
]
