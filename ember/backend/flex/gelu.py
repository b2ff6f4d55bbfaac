"""flex's fused exact GELU, forward and backward, in float32.

``gelu(x) = x Phi(x) = relu(x) - |x| Q(|x|)``, with ``Q`` the standard normal's upper
tail (``Phi(x) = 1 - Q(x)`` for ``x >= 0``, ``Q(-x)`` otherwise), so one formula
serves both signs and the negative tail keeps its relative accuracy. The gradient is
``Phi(x) + x phi(x)`` with ``phi(x) = exp(-x^2 / 2) / sqrt(2 pi)``, the exponential that
``Q`` computes anyway. Both run as native loops (:mod:`ember.backend.flex.native`)
or, without them, block by block in cache with numpy (see
:mod:`ember.backend.flex.special`); other dtypes take the composite.
"""

from __future__ import annotations

import math

import numpy as np

from ember.backend.flex import native
from ember.backend.flex.quiet import quietly
from ember.backend.flex.special import blocks, normal_tail, scratch

_F32 = np.dtype(np.float32)
_INV_SQRT_2PI = np.float32(1.0 / math.sqrt(2.0 * math.pi))
_SIGN = np.uint32(0x80000000)
_ZERO = np.float32(0.0)
_HALF = np.float32(0.5)


@quietly
def gelu(x: np.ndarray):
    """``x Phi(x)`` for float32 ``x``; ``NotImplemented`` for other dtypes."""
    if x.dtype != _F32:
        return NotImplemented
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat.size, _F32)
    kernels = native.kernels(flat.size)
    if kernels is not None:
        kernels.gelu(native.address(flat), native.address(out), flat.size)
        return out.reshape(x.shape)
    z, t = scratch(flat.size, 2)
    for block in blocks(flat.size):
        xb, ob = flat[block], out[block]
        k = xb.size
        zb, tb = z[:k], t[:k]
        np.abs(xb, out=zb)
        normal_tail(zb, ob, tb)
        ob *= zb  # |x| Q(|x|)
        np.maximum(xb, _ZERO, out=tb)
        np.subtract(tb, ob, out=ob)
    return out.reshape(x.shape)


@quietly
def gelu_backward(x: np.ndarray, grad: np.ndarray):
    """``grad (Phi(x) + x phi(x))`` for float32 ``x`` and ``grad`` of one shape."""
    if x.dtype != _F32 or grad.dtype != _F32 or x.shape != grad.shape:
        return NotImplemented
    flat = np.ascontiguousarray(x).reshape(-1)
    g = np.ascontiguousarray(grad).reshape(-1)
    out = np.empty(flat.size, _F32)
    kernels = native.kernels(flat.size)
    if kernels is not None:
        kernels.gelu_backward(native.address(flat), native.address(g), native.address(out), flat.size)
        return out.reshape(x.shape)
    z, t = scratch(flat.size, 2)
    for block in blocks(flat.size):
        xb, ob = flat[block], out[block]
        k = xb.size
        zb, tb = z[:k], t[:k]
        np.abs(xb, out=zb)
        normal_tail(zb, ob, tb)  # ob = Q(|x|), tb = exp(-x^2 / 2)
        # Phi(x) = 1/2 + sign(x) (1/2 - Q(|x|)), the sign set bitwise.
        np.subtract(_HALF, ob, out=ob)
        bits = ob.view(np.uint32)
        np.bitwise_or(bits, np.bitwise_and(xb.view(np.uint32), _SIGN), out=bits)
        ob += _HALF
        tb *= xb
        tb *= _INV_SQRT_2PI  # x phi(x)
        ob += tb
        ob *= g[block]
    return out.reshape(x.shape)
