"""Complex parts and FFTs: forward recording and backward steps side by side.

Gradients follow PyTorch's convention for complex numbers ("Autograd for Complex
Numbers"): the gradient of a real loss ``L`` for a complex ``z = x + iy`` is
``dL/dx + i dL/dy`` (the conjugate Wirtinger derivative times two), so a holomorphic
``f`` sends ``g`` back as ``g * conj(f'(z))`` and a linear map ``A`` as ``A^H g``.
The FFTs are linear: each sends its gradient back through its adjoint, the inverse
transform with the dual scaling (``backward`` <-> ``forward``, ``ortho`` itself), with
the crop or zero-padding of the signal lengths undone and, for ``rfft``/``irfft``,
PyTorch's handling of the Hermitian half (pad the half spectrum with zeros; double
the bins that stand for two).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.backend.autodiff.graph import AutodiffTensor
from ember.backend.autodiff.rules.common import RecordMixin, zeros, zeros_like
from ember.backend.dtype import DType
from ember.backend.ops import BinaryOp, ComplexOp, FftOp

COMPLEX_NP = frozenset({np.dtype(np.complex64), np.dtype(np.complex128)})
DUAL_NORM = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


def conj(ops: Any, x: Any) -> Any:
    """``conj(x)`` for a complex primitive; ``x`` itself otherwise (scalars too)."""
    if getattr(x, "dtype", None) in COMPLEX_NP:
        return ops.complex_unary(ComplexOp.CONJ, x)
    return x


def _real_step(ops, g, saved, ctx):
    return (ops.complex(g, zeros_like(ops, g)),)


def _imag_step(ops, g, saved, ctx):
    return (ops.complex(zeros_like(ops, g), g),)


def _conj_step(ops, g, saved, ctx):
    return (ops.complex_unary(ComplexOp.CONJ, g),)


def _abs_step(ops, g, saved, ctx):
    """``g * z / |z|`` (0 at ``z = 0``, as PyTorch's ``sgn``)."""
    z, r = saved
    safe = ops.where(ops.binary(BinaryOp.EQ, r, 0.0), 1.0, r)
    scale = ops.binary(BinaryOp.DIV, g, safe)
    return (ops.binary(BinaryOp.MUL, z, ops.cast(scale, DType.from_numpy(z.dtype))),)


def _angle_step(ops, g, saved, ctx):
    """``g * i z / |z|^2`` (0 at ``z = 0``): ``d atan2(y, x) = (-y dx + x dy) / r^2``."""
    (z,) = saved
    x, y = ops.complex_unary(ComplexOp.REAL, z), ops.complex_unary(ComplexOp.IMAG, z)
    r2 = ops.binary(BinaryOp.ADD, ops.binary(BinaryOp.MUL, x, x), ops.binary(BinaryOp.MUL, y, y))
    scale = ops.binary(BinaryOp.DIV, g, ops.where(ops.binary(BinaryOp.EQ, r2, 0.0), 1.0, r2))
    return (
        ops.complex(
            ops.binary(BinaryOp.MUL, ops.binary(BinaryOp.MUL, y, scale), -1.0), ops.binary(BinaryOp.MUL, x, scale)
        ),
    )


_COMPLEX_STEPS = {
    ComplexOp.REAL: (False, False, _real_step),
    ComplexOp.IMAG: (False, False, _imag_step),
    ComplexOp.CONJ: (False, False, _conj_step),
    ComplexOp.ABS: (True, True, _abs_step),
    ComplexOp.ANGLE: (True, False, _angle_step),
}


def _complex_step(ops, g, saved, ctx):
    track_real, track_imag = ctx
    real = ops.complex_unary(ComplexOp.REAL, g) if track_real else None
    imag = ops.complex_unary(ComplexOp.IMAG, g) if track_imag else None
    return (real, imag)


def fit(ops: Any, x: Any, dims: tuple[int, ...], sizes: tuple[int, ...]) -> Any:
    """``x`` cropped or zero-padded at the end of each of ``dims`` to ``sizes``."""
    shape = list(x.shape)
    for dim, size in zip(dims, sizes):
        if shape[dim] > size:
            region = tuple((0, size if d == dim else n, 1) for d, n in enumerate(shape))
            x = ops.slice(x, region)
            shape[dim] = size
        elif shape[dim] < size:
            region = tuple((0, n, 1) for n in shape)
            shape[dim] = size
            x = ops.slice_assign(zeros(ops, tuple(shape), x.dtype), region, x)
    return x


def _hermitian_weights(ops: Any, g: Any, dim: int, n: int) -> Any:
    """Weights ``[1, 2, ..., 2, (1)]`` along ``dim`` of the half spectrum of a length-``n``
    signal: the bins that stand for themselves and their mirror image count twice."""
    half = n // 2 + 1
    weights = np.ones(half, dtype=g.dtype)
    weights[1 : 1 + n - half] = 2
    shape = (half,) + (1,) * (len(g.shape) - dim - 1)
    return ops.from_numpy(weights.reshape(shape))


def _fft_step(ops, g, saved, ctx):
    op, sizes, dims, norm, in_sizes = ctx
    dual = DUAL_NORM[norm]
    if op is FftOp.FFT or op is FftOp.IFFT:
        inverse = FftOp.IFFT if op is FftOp.FFT else FftOp.FFT
        return (fit(ops, ops.fft(inverse, g, sizes, dims, dual), dims, in_sizes),)
    last = dims[-1]
    if op is FftOp.RFFT:
        full = fit(ops, g, (last,), (sizes[-1],))
        grad = ops.complex_unary(ComplexOp.REAL, ops.fft(FftOp.IFFT, full, sizes, dims, dual))
        return (fit(ops, grad, dims, in_sizes),)
    # irfft: the adjoint of the Hermitian extension is rfft with the mirrored bins doubled
    half = ops.fft(FftOp.RFFT, g, sizes, dims, dual)
    if sizes[-1] - (sizes[-1] // 2 + 1) > 0:
        half = ops.binary(BinaryOp.MUL, half, _hermitian_weights(ops, half, last, sizes[-1]))
    return (fit(ops, half, dims, in_sizes),)


class SpectralRules(RecordMixin):
    """Recording of ``complex_unary``, ``complex`` and ``fft`` (all linear in their
    input but ``abs``/``angle``; nothing saved for the linear ones)."""

    def complex_unary(self, op: ComplexOp, x: AutodiffTensor) -> AutodiffTensor:
        out = self.inner.complex_unary(op, x.inner)
        if x.node is None:
            return AutodiffTensor(out, None)
        keep_x, keep_out, step = _COMPLEX_STEPS[op]
        saved: tuple = ()
        if keep_x:
            saved = (self._keep(x), self._out(out, False)) if keep_out else (self._keep(x),)
        return self._record(out, (x.node,), step, saved, None)

    def complex(self, real: AutodiffTensor, imag: AutodiffTensor) -> AutodiffTensor:
        out = self.inner.complex(real.inner, imag.inner)
        nr, ni = real.node, imag.node
        if nr is None and ni is None:
            return AutodiffTensor(out, None)
        return self._record(out, (nr, ni), _complex_step, (), (nr is not None, ni is not None))

    def fft(self, op: FftOp, x: AutodiffTensor, sizes: tuple[int, ...], dims: tuple[int, ...], norm: str) -> Any:
        out = self.inner.fft(op, x.inner, sizes, dims, norm)
        if x.node is None:
            return AutodiffTensor(out, None)
        in_sizes = tuple(x.shape[d] for d in dims)
        return self._record(out, (x.node,), _fft_step, (), (op, sizes, dims, norm, in_sizes))
