"""FFTs on the GPU: radix-2 Stockham passes for power-of-two lengths, Bluestein's
chirp-z transform (a power-of-two convolution) for the others.

:func:`fft_last` transforms the last dim of a contiguous complex64 tensor ``[batch, n]``
(unnormalised; ``inverse`` flips the sign of the exponent). A Stockham pass ``p``
(1, 2, 4, ..., n/2) takes butterfly ``j`` of each row from ``x[j]`` and ``x[j + n/2]``
and writes ``a + w b`` and ``a - w b`` to ``2j - k`` and ``2j - k + p`` (``k = j mod p``,
``w = exp(-+ i pi k / p)``): after ``log2 n`` passes between two buffers the row is in
natural order, with no bit reversal. A length that is not a power of two is the
convolution of the signal times the chirp ``exp(-+ i pi j^2 / n)`` with the conjugate
chirp (Bluestein), computed by power-of-two FFTs of length ``m >= 2n - 1``; the chirp
and the filter's spectrum are computed on the host in float64 once per ``(n, inverse)``
and kept with the backend's plans.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ember.backend.cube import wgsl
from ember.backend.cube.buffer import CubeTensor
from ember.backend.cube.cache import KernelSource
from ember.backend.dtype import DType
from ember.backend.ops import BinaryOp

if TYPE_CHECKING:
    from ember.backend.cube.kernels.context import KernelContext

_WG = wgsl.WORKGROUP


def _radix2_source(inverse: bool) -> KernelSource:
    sign = "" if inverse else "-"
    body = "\n".join(
        [
            "    if (gi >= info[0]) { return; }",
            "    let n = info[1];",
            "    let half = n >> 1u;",
            "    let p = info[2];",
            "    let row = (gi / half) * n;",
            "    let j = gi % half;",
            "    let k = j & (p - 1u);",
            "    let a = in0[row + j];",
            "    let b = in0[row + j + half];",
            f"    let angle = {sign}3.14159265358979 * f32(k) / f32(p);",
            "    let t = cmul_f(b, c64(cos(angle), sin(angle)));",
            "    let o = row + ((j - k) << 1u) + k;",
            "    out0[o] = a + t;",
            "    out0[o + p] = a - t;",
        ]
    )
    code = wgsl.main_linear(body)
    source = "\n".join([wgsl.bindings(["c64"], ["c64"]), wgsl.helpers_for(code), code])
    return KernelSource(f"fft_radix2{'_inverse' if inverse else ''}", source, 1, 1)


def _radix2(backend: KernelContext, x: CubeTensor, inverse: bool) -> CubeTensor:
    """The unnormalised FFT of each row of the contiguous ``x`` ``[batch, n]``, ``n`` a
    power of two (``x`` is left untouched: the passes alternate between two new buffers)."""
    n = x.shape[-1]
    pairs = x.size // 2
    kernel = backend.cache.get(("fft_radix2", inverse), lambda: _radix2_source(inverse))
    buffers = [backend.empty(x.shape, x.storage), backend.empty(x.shape, x.storage)]
    current, p, turn = x, 1, 0
    while p < n:
        out = buffers[turn]
        backend.runtime.launch(kernel, [current.buffer, out.buffer], [pairs, n, p], -(-pairs // _WG))
        current, p, turn = out, p * 2, 1 - turn
    return current


def _bluestein_plan(backend: KernelContext, n: int, inverse: bool) -> tuple[CubeTensor, CubeTensor, int]:
    """The chirp ``[n]`` and the spectrum of the conjugate chirp filter ``[m]`` (scaled by
    ``1 / m``, the inverse FFT's normalisation) for length ``n``, cached per backend."""
    key = ("fft_bluestein", n, inverse)
    plan = backend.plans.get(key)
    if plan is None:
        m = 1 << (2 * n - 2).bit_length()
        j = np.arange(n, dtype=np.int64)
        angle = np.pi * ((j * j) % (2 * n)) / n
        chirp = np.exp((1j if inverse else -1j) * angle)
        filt = np.zeros(m, np.complex128)
        filt[:n] = np.conj(chirp)
        filt[m - n + 1 :] = np.conj(chirp[1:])[::-1]
        spectrum = np.fft.fft(filt) / m
        ops: Any = backend
        plan = (ops.from_numpy(chirp.astype(np.complex64)), ops.from_numpy(spectrum.astype(np.complex64)), m)
        backend.plans[key] = plan
    return plan


def fft_last(backend: KernelContext, x: CubeTensor, inverse: bool) -> CubeTensor:
    """The unnormalised FFT (``inverse``: the unnormalised inverse) of each row of the
    contiguous complex64 ``x`` ``[batch, n]``."""
    n = x.shape[-1]
    if n == 1 or x.size == 0:
        return x
    if n & (n - 1) == 0:
        return _radix2(backend, x, inverse)
    ops: Any = backend  # the backend's own elementwise and layout ops
    chirp, spectrum, m = _bluestein_plan(backend, n, inverse)
    batch = x.size // n
    a = ops.binary(BinaryOp.MUL, x, chirp)
    padded = ops.slice_assign(ops.full((batch, m), 0, DType.COMPLEX64), ((0, batch, 1), (0, n, 1)), a)
    product = ops.binary(BinaryOp.MUL, _radix2(backend, padded, False), spectrum)
    conv = _radix2(backend, product, True)
    return ops.binary(BinaryOp.MUL, ops.slice(conv, ((0, batch, 1), (0, n, 1))), chirp)
