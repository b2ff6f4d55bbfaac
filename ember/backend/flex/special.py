"""Special functions numpy lacks, computed on numpy arrays.

float32 ``erf`` and the normal tail that GELU needs are evaluated block by block
(16K elements, so each block stays in cache through all its passes) with in-place
ufunc calls: about a dozen passes over cached data instead of as many full-size
temporaries. The formula is Abramowitz & Stegun 7.1.26,
``erfc(a) = t (a1 + a2 t + a3 t^2 + a4 t^3 + a5 t^4) exp(-a^2)`` with
``t = 1 / (1 + p a)``, absolute error below 1.5e-7 (about one float32 ulp at 1);
``erf`` adds a Taylor series near zero for relative accuracy there.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

_ERF_EXACT = np.frompyfunc(math.erf, 1, 1)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_F32 = np.dtype(np.float32)

#: Elements per block of the blocked evaluations (64 KiB of float32).
BLOCK = 16384

_P = 0.3275911
_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
_SQRT_HALF = math.sqrt(0.5)
# The normal tail Q(z) = erfc(z / sqrt 2) / 2 in the same form: t = 1 / (1 + p z / sqrt 2),
# Q(z) = t (b1 + ... + b5 t^4) exp(-z^2 / 2) with b_i = a_i / 2.
_P_NORMAL = np.float32(_P * _SQRT_HALF)
_B = tuple(np.float32(a / 2) for a in _A)
_A32 = tuple(np.float32(a) for a in _A)
_P32 = np.float32(_P)
# Taylor series of erf near 0: 2/sqrt(pi) x (1 - x^2/3 + x^4/10 - x^6/42 + x^8/216).
_SERIES = tuple(np.float32(c) for c in (1.0 / 216, -1.0 / 42, 1.0 / 10, -1.0 / 3, 1.0))
_NEAR = np.float32(0.5)


def blocks(n: int) -> Iterator[slice]:
    """Consecutive slices of at most :data:`BLOCK` elements covering ``range(n)``."""
    for start in range(0, n, BLOCK):
        yield slice(start, min(start + BLOCK, n))


def scratch(n: int, count: int) -> list[np.ndarray]:
    """``count`` float32 work buffers of one block each (``n`` elements when smaller)."""
    size = min(n, BLOCK)
    return [np.empty(size, _F32) for _ in range(count)]


def horner(t: np.ndarray, coefficients: tuple, out: np.ndarray) -> np.ndarray:
    """``out = t * (c0 + t * (c1 + ...))`` for ``coefficients = (c_last, ..., c0)``,
    highest degree first, written in place."""
    np.multiply(t, coefficients[0], out=out)
    for c in coefficients[1:]:
        out += c
        out *= t
    return out


def normal_tail(z: np.ndarray, out: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ``z >= 0`` (one float32 block): ``out = Q(z)``, the standard normal's upper
    tail ``P(N > z)``, and ``t = exp(-z^2 / 2)``; absolute error below 7.5e-8."""
    np.multiply(z, _P_NORMAL, out=t)
    t += 1
    np.reciprocal(t, out=t)
    horner(t, _B[::-1], out)
    np.multiply(z, z, out=t)
    t *= -0.5
    np.exp(t, out=t)
    out *= t
    return out, t


def erf(x: np.ndarray) -> np.ndarray:
    """The error function: float64 through ``math.erf`` (to float64 precision),
    narrower floats in float32 (absolute error below 5e-7, relative near zero)."""
    if x.dtype == np.float64:
        return _ERF_EXACT(x).astype(np.float64)
    flat = np.ascontiguousarray(x, dtype=_F32).reshape(-1)
    out = np.empty(flat.size, _F32)
    a, t, s = scratch(flat.size, 3)
    for block in blocks(flat.size):
        xb, ob = flat[block], out[block]
        k = xb.size
        ab, tb, sb = a[:k], t[:k], s[:k]
        np.abs(xb, out=ab)
        np.multiply(ab, _P32, out=tb)
        tb += 1
        np.reciprocal(tb, out=tb)
        horner(tb, _A32[::-1], ob)
        np.multiply(ab, ab, out=tb)
        np.negative(tb, out=tb)
        np.exp(tb, out=tb)
        ob *= tb
        np.subtract(1, ob, out=ob)  # erf(|x|)
        # The series near 0, blended in arithmetically (a masked copy branches per element).
        # Its argument is clamped to [0, 1/2] so that it stays finite where it is not used.
        np.minimum(ab, _NEAR, out=tb)
        np.multiply(tb, tb, out=tb)
        horner(tb, _SERIES[:-1], sb)  # x^2 (-1/3 + x^2 (1/10 + ...))
        sb += _SERIES[-1]
        np.minimum(ab, _NEAR, out=tb)
        sb *= tb
        sb *= np.float32(_TWO_OVER_SQRT_PI)
        sb -= ob
        np.less(ab, _NEAR, out=tb, casting="unsafe")  # 1.0 near 0, else 0.0
        sb *= tb
        ob += sb
        _copy_sign(ob, xb)
    return out.reshape(x.shape).astype(x.dtype, copy=False)


_SIGN = np.uint32(0x80000000)


def _copy_sign(magnitude: np.ndarray, sign: np.ndarray) -> None:
    """``magnitude`` (non-negative float32) takes the sign bit of ``sign``, in place;
    bit operations, which numpy vectorises (its ``copysign`` does not)."""
    bits = magnitude.view(np.uint32)
    np.bitwise_or(bits, np.bitwise_and(sign.view(np.uint32), _SIGN), out=bits)
