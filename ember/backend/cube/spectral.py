"""cube's complex64 ops beyond the elementwise tables: the parts of a complex tensor,
complex matmul and reductions (over the real and imaginary parts), and the FFTs
(:mod:`ember.backend.cube.kernels.fft`) over any dims, with ``n``/``s`` crop or
zero-padding, the half spectra of ``rfft``/``irfft`` and the three scalings. The
``CubeBackend`` methods of the same names call these functions."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ember.backend.cube import ir
from ember.backend.cube.buffer import CubeTensor
from ember.backend.cube.kernels import elementwise, layout
from ember.backend.cube.kernels.fft import fft_last
from ember.backend.dtype import DType
from ember.backend.ops import BinaryOp, ComplexOp, FftOp

if TYPE_CHECKING:
    from ember.backend.cube.backend import CubeBackend

_KERNEL = {
    ComplexOp.REAL: "real",
    ComplexOp.IMAG: "imag",
    ComplexOp.CONJ: "conj",
    ComplexOp.ABS: "cabs",
    ComplexOp.ANGLE: "angle",
}


def complex_unary(backend: CubeBackend, op: ComplexOp, x: CubeTensor) -> CubeTensor:
    expr = ir.unary(_KERNEL[op], ir.load(0, "c64"))
    storage = x.storage if ir.type_of(expr) == "c64" else backend.storage(DType.FLOAT32)
    return elementwise.run(backend, expr, [x], storage, x.shape)


def complex(backend: CubeBackend, real: CubeTensor, imag: CubeTensor) -> CubeTensor:
    expr = ir.binary("complex", ir.load(0, "f32"), ir.load(1, "f32"))
    return elementwise.run(backend, expr, [real, imag], backend.storage(DType.COMPLEX64), real.shape)


def parts(backend: CubeBackend, x: CubeTensor) -> tuple[CubeTensor, CubeTensor]:
    return complex_unary(backend, ComplexOp.REAL, x), complex_unary(backend, ComplexOp.IMAG, x)


def complex_matmul(backend: CubeBackend, a: CubeTensor, b: CubeTensor) -> CubeTensor:
    """``(ar + i ai)(br + i bi)`` by four float32 matmuls (the tuned GEMM kernels)."""
    (ar, ai), (br, bi) = parts(backend, a), parts(backend, b)
    real = backend.binary(BinaryOp.SUB, backend.matmul(ar, br), backend.matmul(ai, bi))
    imag = backend.binary(BinaryOp.ADD, backend.matmul(ar, bi), backend.matmul(ai, br))
    return complex(backend, real, imag)


def by_parts(backend: CubeBackend, fn: Any, x: CubeTensor) -> CubeTensor:
    """A real-linear op (sum, mean, cumsum) on the real and imaginary parts."""
    real, imag = parts(backend, x)
    return complex(backend, fn(real), fn(imag))


# ------------------------------------------------------------------ FFTs
def _along(backend: CubeBackend, x: CubeTensor, dim: int, size: int, inverse: bool) -> CubeTensor:
    """The unnormalised complex FFT of ``x`` along ``dim``, cropped or zero-padded to ``size``."""
    x = _fit(backend, x, dim, size)
    rank = len(x.shape)
    axes = tuple(d for d in range(rank) if d != dim) + (dim,)
    moved = layout.contiguous(backend, layout.permute(x, axes))
    rows = moved.view((moved.size // size, size), (size, 1), 0)
    out = fft_last(backend, rows, inverse)
    out = out.view(moved.shape, moved.strides, 0) if out.is_contiguous() else backend.reshape(out, moved.shape)
    back = [0] * rank
    for i, a in enumerate(axes):
        back[a] = i
    return layout.permute(out, tuple(back))


def _fit(backend: CubeBackend, x: CubeTensor, dim: int, size: int) -> CubeTensor:
    n = x.shape[dim]
    if n == size:
        return x
    full = tuple((0, min(n, size) if d == dim else s, 1) for d, s in enumerate(x.shape))
    if n > size:
        return backend.slice(x, full)
    shape = tuple(size if d == dim else s for d, s in enumerate(x.shape))
    return backend.slice_assign(backend.full(shape, 0, DType.COMPLEX64), full, x)


def fft(
    backend: CubeBackend, op: FftOp, x: CubeTensor, sizes: tuple[int, ...], dims: tuple[int, ...], norm: str
) -> CubeTensor:
    """``Backend.fft`` on cube: complex transforms along each dim, scaled once at the end."""
    inverse = op in (FftOp.IFFT, FftOp.IRFFT)
    if op is FftOp.RFFT:
        x = backend.cast(x, DType.COMPLEX64)
        last, n = dims[-1], sizes[-1]
        x = _along(backend, x, last, n, False)
        x = backend.slice(x, tuple((0, n // 2 + 1 if d == last else s, 1) for d, s in enumerate(x.shape)))
        pairs: list[tuple[int, int]] = list(zip(dims[:-1], sizes[:-1]))
    elif op is FftOp.IRFFT:
        for d, n in zip(dims[:-1], sizes[:-1]):
            x = _along(backend, x, d, n, True)
        x = _hermitian(backend, x, dims[-1], sizes[-1])
        pairs = []
    else:
        pairs = list(zip(dims, sizes))
    for d, n in pairs:
        x = _along(backend, x, d, n, inverse)
    if op is FftOp.IRFFT:
        x = complex_unary(backend, ComplexOp.REAL, _along(backend, x, dims[-1], sizes[-1], True))
    total = math.prod(sizes)
    scale = {"backward": 1.0 / total if inverse else 1.0, "ortho": 1.0 / math.sqrt(total)}.get(
        norm, 1.0 if inverse else 1.0 / total
    )
    return x if scale == 1.0 else backend.binary(BinaryOp.MUL, x, scale)


def _hermitian(backend: CubeBackend, half: CubeTensor, dim: int, n: int) -> CubeTensor:
    """The full spectrum of length ``n`` of a real signal from its first ``n // 2 + 1``
    bins: ``X[k] = conj(X[n - k])`` above them (imaginary parts that a real signal
    cannot have only reach the imaginary part of the result, which ``irfft`` drops)."""
    h = n // 2 + 1
    half = _fit(backend, half, dim, h)
    if n - h < 1:
        return half
    region = tuple((1, n - h + 1, 1) if d == dim else (0, s, 1) for d, s in enumerate(half.shape))
    mirror = complex_unary(backend, ComplexOp.CONJ, backend.flip(backend.slice(half, region), (dim,)))
    return backend.cat([half, mirror], dim)
