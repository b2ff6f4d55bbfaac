"""Philox4x32-10 and the one mapping from its words to floats, shared by every backend.

A draw is a pure function of ``(key, counter)``: the 64-bit ``key`` and the 64-bit
``counter`` of its first block. Block ``counter + j`` is the Philox4x32-10 (Salmon et
al., 2011; Random123's constants) encryption of the 128-bit counter
``(lo32(counter + j), hi32(counter + j), 0, 0)`` under ``(lo32(key), hi32(key))``: four
32-bit words. Element ``i`` of a 32-bit draw comes from block ``i // 4``, lane
``i % 4``; a draw of ``n`` such values uses :func:`blocks_for` ``= ceil(n / 4)`` blocks.

The words become float32 values by exact integer and IEEE single-precision steps
(``+``, ``-``, ``*`` rounded to nearest, no fused multiply-add, no library ``log``,
``sqrt`` or ``sin``), so numpy here and the WGSL kernel in
``ember.backend.cube.kernels.random`` give the same bits:

* **uniform** ``u = (w >> 8) * 2**-24`` in ``[0, 1)``; on ``[lo, hi)``:
  ``min(lo + u * s, c)`` with ``lo``, ``s = hi - lo`` rounded to float32 on the host and
  ``c`` the largest float32 below ``hi`` (``lo`` when the range is empty).
* **normal** by Box-Muller on the lane pairs (0, 1) and (2, 3): from ``(a, b)``,
  ``u1 = (2 * (a >> 9) + 1) * 2**-24`` in ``(0, 1)`` and ``r = sqrt(-2 ln u1)`` (at most
  5.77), the angle ``2 pi (b >> 8) / 2**24``; the outputs are ``r cos``, ``r sin``, then
  ``mean + std * z``. ``ln`` is a degree-9 polynomial in ``m - 1`` after splitting off
  the exponent, ``sqrt`` is three Newton steps of the reciprocal square root, ``sin``
  and ``cos`` are Taylor polynomials on ``[0, pi/4]`` after an exact octant reduction of
  the 24-bit angle. Each standard normal is within ``1e-6`` of the exact transform.
* **bernoulli** ``u < p`` with ``p`` rounded to float32.

Other float widths are drawn as float32 and rounded (float16, bfloat16); int dtypes
truncate the float32 values. **float64** (flex only) takes two words per value:
uniform ``((w0 >> 5) * 2**26 + (w1 >> 6)) * 2**-53``; normal by Box-Muller on a
pair of those with numpy's float64 ``log``/``sqrt``/``cos``/``sin`` (bit-identical
on one machine); a float64 draw of ``n`` values uses ``ceil(n / 2)`` blocks.
"""

from __future__ import annotations

import math

import numpy as np

from ember.backend.distribution import Distribution
from ember.backend.dtype import DType
from ember.errors import ValueRangeError

MASK64 = 0xFFFF_FFFF_FFFF_FFFF
M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
ROUNDS = 10

# float32 constants, as their bit patterns (the WGSL kernel writes them with bitcast).
# ln(1 + t) / t on [sqrt(1/2) - 1, sqrt(2) - 1], lowest degree first: a least-squares fit of
# degree 9 on 2000 Chebyshev nodes, rounded to float32 (error 3e-8, the float32 rounding).
LOG_COEFFS = (
    0x3F800000,
    0xBEFFFFFC,
    0x3EAAAAA8,
    0xBE800214,
    0x3E4CD23B,
    0xBE2A13D4,
    0x3E11343A,
    0xBE079613,
    0x3E043DB9,
    0xBD9C7039,
)
SIN_COEFFS = tuple(int(np.float32(c).view(np.uint32)) for c in (1.0, -1 / 6, 1 / 120, -1 / 5040, 1 / 362880))
COS_COEFFS = tuple(int(np.float32(c).view(np.uint32)) for c in (1.0, -1 / 2, 1 / 24, -1 / 720, 1 / 40320, -1 / 3628800))
LN2 = int(np.float32(math.log(2.0)).view(np.uint32))
ANGLE_STEP = int(np.float32(2.0 * math.pi / 2**24).view(np.uint32))  # radians per unit of the 24-bit angle
SQRT2_BITS = 0x3FB504F3  # float32(sqrt(2))
RSQRT_MAGIC = 0x5F3759DF

_CHUNK = 1 << 14  # blocks per vectorised pass (its arrays stay in cache)
_U32 = np.uint32
_F32 = np.float32
_M = np.array([[M0], [M1]], np.uint64)
_LO = np.uint64(0xFFFF_FFFF)
_S32 = np.uint64(32)


def _f32(bits: int) -> np.float32:
    # numpy's stubs type ``[()]`` as an array; on a 0-d array it gives the scalar
    return np.array(bits, _U32).view(_F32)[()]  # type: ignore[return-value]


def blocks_for(n: int, dtype: DType) -> int:
    """The counters a draw of ``n`` values of ``dtype`` uses."""
    return -(-n // 2) if dtype is DType.FLOAT64 else -(-n // 4)


def block(key: int, counter: int) -> tuple[int, int, int, int]:
    """One block's four words, in plain Python (for a single key, a few microseconds)."""
    c0, c1, c2, c3 = counter & 0xFFFF_FFFF, (counter >> 32) & 0xFFFF_FFFF, 0, 0
    k0, k1 = key & 0xFFFF_FFFF, (key >> 32) & 0xFFFF_FFFF
    for _ in range(ROUNDS):
        p0 = M0 * c0
        p1 = M1 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & 0xFFFF_FFFF, (p0 >> 32) ^ c3 ^ k1, p0 & 0xFFFF_FFFF
        k0 = (k0 + W0) & 0xFFFF_FFFF
        k1 = (k1 + W1) & 0xFFFF_FFFF
    return c0, c1, c2, c3


def words(key: int, counter: int, blocks: int) -> np.ndarray:
    """The words of blocks ``counter .. counter + blocks - 1`` as a ``(blocks, 4)`` uint32 array."""
    out = np.empty((blocks, 4), _U32)
    for start in range(0, blocks, _CHUNK):
        n = min(_CHUNK, blocks - start)
        _words_into(out[start : start + n], key, (counter + start) & MASK64)
    return out


def _words_into(out: np.ndarray, key: int, counter: int) -> None:
    # Lanes 0 and 2 are multiplied together as the rows of one (2, n) uint64 array.
    n = out.shape[0]
    ctr = np.arange(n, dtype=np.uint64)
    ctr += np.uint64(counter)  # wraps modulo 2**64, as the counter does
    c = np.empty((2, n), np.uint64)  # lanes (0, 2)
    x = np.zeros((2, n), np.uint64)  # lanes (1, 3)
    p = np.empty((2, n), np.uint64)
    np.bitwise_and(ctr, _LO, out=c[0])
    c[1] = 0
    np.right_shift(ctr, _S32, out=x[0])
    k0, k1 = key & 0xFFFF_FFFF, (key >> 32) & 0xFFFF_FFFF
    keys = np.empty((2, 1), np.uint64)
    for _ in range(ROUNDS):
        np.multiply(_M, c, out=p)
        hi_lo = p[::-1]  # (lane-2 product, lane-0 product)
        np.right_shift(hi_lo, _S32, out=c)
        c ^= x
        keys[0, 0], keys[1, 0] = k0, k1
        c ^= keys
        np.bitwise_and(hi_lo, _LO, out=x)
        k0 = (k0 + W0) & 0xFFFF_FFFF
        k1 = (k1 + W1) & 0xFFFF_FFFF
    out[:, 0] = c[0]
    out[:, 1] = x[0]
    out[:, 2] = c[1]
    out[:, 3] = x[1]


# ---------------------------------------------------------------------- float32 mappings
_F32_MAX = float(np.finfo(np.float32).max)


def check_float32(distribution: Distribution) -> None:
    """Raise unless a float32 draw of ``distribution`` stays finite."""
    if distribution.kind == "bernoulli":
        return
    a, b = distribution.a, distribution.b
    spread = b - a if distribution.kind == "uniform" else 6.0 * b
    if max(abs(a), abs(b), abs(spread)) > _F32_MAX:
        raise ValueRangeError(
            f"ember: Tensor.random: {distribution!r} does not fit in float32 (largest {_F32_MAX:.4g}); "
            "draw a smaller range and scale it, or draw float64 on Device.flex()"
        )


def uniform_params(low: float, high: float) -> tuple[np.float32, np.float32, np.float32]:
    """``(lo, s, c)`` of the uniform mapping ``min(lo + u * s, c)`` on ``[low, high)``."""
    lo, hi = _F32(low), _F32(high)
    scale = _F32(float(high) - float(low))
    cap = np.nextafter(hi, _F32(-np.inf)) if hi > lo else lo
    return lo, scale, _F32(cap)


def unit_f32(w: np.ndarray) -> np.ndarray:
    """Uniform float32 in ``[0, 1)`` from uint32 words: ``(w >> 8) * 2**-24``."""
    u = (w >> _U32(8)).astype(_F32)
    u *= _F32(2.0**-24)
    return u


def _poly(x: np.ndarray, coeffs: tuple[int, ...]) -> np.ndarray:
    """Horner's rule in float32, one rounding per ``*`` and per ``+``."""
    p = np.full_like(x, _f32(coeffs[-1]))
    for c in coeffs[-2::-1]:
        p *= x
        p += _f32(c)
    return p


def _log_unit(u: np.ndarray) -> np.ndarray:
    """ln(u) for float32 ``u`` in (0, 1): exponent split, then a polynomial."""
    bits = u.view(_U32)
    big = (bits & _U32(0x7FFFFF)) > _U32(SQRT2_BITS & 0x7FFFFF)  # mantissa above sqrt(2)
    e = (bits >> _U32(23)).astype(np.int32)
    e += big
    e -= 127
    m = bits & _U32(0x7FFFFF)
    m |= _U32(0x3F800000)
    m -= big.astype(_U32) << _U32(23)  # halve m (exactly), so m lies in (sqrt(1/2), sqrt(2)]
    t = m.view(_F32)
    t -= _F32(1.0)
    p = _poly(t, LOG_COEFFS)
    p *= t
    p += e.astype(_F32) * _f32(LN2)
    return p


def _sqrt_pos(x: np.ndarray) -> np.ndarray:
    """sqrt(x) for float32 ``x > 0``: three Newton steps of 1/sqrt from the classic guess."""
    y = (_U32(RSQRT_MAGIC) - (x.view(_U32) >> _U32(1))).view(_F32)
    h = x * _F32(0.5)
    for _ in range(3):
        t = h * y
        t *= y
        np.subtract(_F32(1.5), t, out=t)
        y *= t
    return x * y


def _cos_sin(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of ``2 pi (b >> 8) / 2**24`` from uint32 words ``b``."""
    t = b >> _U32(8)
    quadrant = t >> _U32(22)
    r = t & _U32(0x3FFFFF)
    flip = r > _U32(0x200000)
    r = np.where(flip, _U32(0x400000) - r, r)  # the angle's complement in its quadrant (exact)
    theta = r.astype(_F32)
    theta *= _f32(ANGLE_STEP)
    z = theta * theta
    s = _poly(z, SIN_COEFFS)
    s *= theta
    c = _poly(z, COS_COEFFS)
    # Undo the flip, then rotate by the quadrant: (c, s) -> (-s, c) -> (-c, -s) -> (s, -c).
    swap = flip ^ (quadrant & _U32(1)).astype(bool)
    cos = np.where(swap, s, c)
    sin = np.where(swap, c, s)
    np.negative(cos, out=cos, where=(quadrant - _U32(1)) < _U32(2))
    np.negative(sin, out=sin, where=quadrant >= _U32(2))
    return cos, sin


def normal_pairs_f32(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Standard normal float32 pairs from uint32 words ``a`` (radius) and ``b`` (angle)."""
    u1 = (((a >> _U32(9)) << _U32(1)) | _U32(1)).astype(_F32)
    u1 *= _F32(2.0**-24)
    x = _log_unit(u1)
    x *= _F32(-2.0)
    r = _sqrt_pos(x)
    cos, sin = _cos_sin(b)
    cos *= r
    sin *= r
    return cos, sin


def _fill_f32(out: np.ndarray, w: np.ndarray, distribution: Distribution) -> None:
    """Values of a float32 draw for ``out`` (flat, ``len(out) <= 4 * len(w)``) from words ``w``."""
    n = out.shape[0]
    kind = distribution.kind
    if kind == "normal":
        lanes = w.T  # both Box-Muller pairs of each block at once: radii (0, 2), angles (1, 3)
        cos, sin = normal_pairs_f32(lanes[0::2].reshape(-1), lanes[1::2].reshape(-1))
        z = np.empty((w.shape[0], 2, 2), _F32)
        z[:, :, 0] = cos.reshape(2, -1).T
        z[:, :, 1] = sin.reshape(2, -1).T
        v = z.reshape(-1)[:n]
        v *= _F32(distribution.b)
        v += _F32(distribution.a)
        out[:] = v
        return
    u = unit_f32(w.reshape(-1)[:n])
    if kind == "uniform":
        if (distribution.a, distribution.b) != (0.0, 1.0):  # lo + u * 1, capped, is u itself
            lo, scale, cap = uniform_params(distribution.a, distribution.b)
            u *= scale
            u += lo
            np.minimum(u, cap, out=u)
        out[:] = u
    else:
        np.less(u, _F32(distribution.a), out=out)


def _fill_f64(out: np.ndarray, w: np.ndarray, distribution: Distribution) -> None:
    n = out.shape[0]
    pairs = w.reshape(-1, 2)
    u = (pairs[:, 0] >> _U32(5)).astype(np.float64)
    u *= 2.0**26
    u += pairs[:, 1] >> _U32(6)
    u *= 2.0**-53
    kind = distribution.kind
    if kind == "normal":
        u = u.reshape(-1, 2)
        r = np.sqrt(-2.0 * np.log1p(-u[:, 0]))  # ln(1 - u), 1 - u in (0, 1]
        angle = (2.0 * math.pi) * u[:, 1]
        z = np.stack([r * np.cos(angle), r * np.sin(angle)], axis=1).reshape(-1)[:n]
        out[:] = z * distribution.b + distribution.a
    elif kind == "uniform":
        v = u[:n] * (distribution.b - distribution.a) + distribution.a
        out[:] = np.minimum(v, np.nextafter(distribution.b, -np.inf)) if distribution.b > distribution.a else v
    else:
        np.less(u[:n], distribution.a, out=out)


def sample(shape: tuple[int, ...], distribution: Distribution, dtype: DType, key: int, counter: int) -> np.ndarray:
    """The draw of ``shape`` values of ``dtype`` at ``(key, counter)``, as numpy (flex's ``random``)."""
    n = math.prod(shape)
    wide = dtype is DType.FLOAT64
    if not wide:
        check_float32(distribution)
    values = np.empty(n, np.float64 if wide else _F32)
    per_block = 2 if wide else 4
    fill = _fill_f64 if wide else _fill_f32
    for start in range(0, -(-n // per_block), _CHUNK):
        blocks = min(_CHUNK, -(-n // per_block) - start)
        w = np.empty((blocks, 4), _U32)
        _words_into(w, key, (counter + start) & MASK64)
        first = start * per_block
        fill(values[first : first + blocks * per_block], w, distribution)
    return values.reshape(shape).astype(dtype.np, copy=False)
