"""flex's fused layer norm and RMS norm over the last dim, forward and backward.

The composite takes nine tensor ops forward and about twenty backward, each a pass
over the activations and a node of the graph; these are six passes forward and
about a dozen backward, with the row statistics (mean, ``1 / std``) kept from the
forward for the backward.
"""

from __future__ import annotations

import numpy as np

from ember.backend.flex import native
from ember.backend.flex.quiet import quietly

_FLOATS = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
_F32 = np.dtype(np.float32)


def _param(p, d: int, value: float, dtype) -> np.ndarray:
    """``p`` contiguous, or ``value`` repeated when it is ``None``."""
    return np.full(d, value, dtype) if p is None else np.ascontiguousarray(p)


def _native_forward(kernels, x, gamma, beta, epsilon):
    rows = _rows(x)
    n, d = rows.shape
    out = np.empty_like(rows)
    mean, rstd = np.empty((n, 1), _F32), np.empty((n, 1), _F32)
    g, b = _param(gamma, d, 1.0, _F32), _param(beta, d, 0.0, _F32)
    kernels.layer_norm(*map(native.address, (rows, g, b, out, mean, rstd)), n, d, float(epsilon))
    stats = x.shape[:-1] + (1,)
    return out.reshape(x.shape), mean.reshape(stats), rstd.reshape(stats)


def _native_backward(kernels, x, gamma, mean, rstd, grad, need_x, need_gamma, need_beta):
    rows, g = _rows(x), _rows(grad)
    n, d = rows.shape
    gamma_c = _param(gamma, d, 1.0, _F32)
    m, r = np.ascontiguousarray(mean, _F32).reshape(-1), np.ascontiguousarray(rstd, _F32).reshape(-1)
    unused = np.empty(1, _F32)  # what the kernel gets for an output it does not write
    dx = np.empty_like(rows) if need_x else unused
    want_params = need_gamma or need_beta
    dgamma = np.zeros(d, _F32) if want_params else unused
    dbeta = np.zeros(d, _F32) if want_params else unused
    need = (1 if need_x else 0) | (2 if want_params else 0)
    kernels.layer_norm_backward(*map(native.address, (rows, gamma_c, m, r, g, dx, dgamma, dbeta)), n, d, need)
    return (
        dx.reshape(x.shape) if need_x else None,
        dgamma if need_gamma and gamma is not None else None,
        dbeta if need_beta else None,
    )


def _rows(x: np.ndarray) -> np.ndarray:
    """``x`` as contiguous ``[rows, D]``."""
    return np.ascontiguousarray(x).reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)


def _row_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``sum(a * b, -1)`` per row, ``[rows, 1]``, without a temporary of the rows' size."""
    return np.einsum("ij,ij->i", a, b)[:, None]


@quietly
def layer_norm(x, gamma, beta, epsilon):
    """See :meth:`ember.backend.base.Backend.layer_norm`."""
    if x.dtype not in _FLOATS or x.ndim == 0 or x.shape[-1] == 0:
        return NotImplemented
    if any(p is not None and p.dtype != x.dtype for p in (gamma, beta)):
        return NotImplemented
    kernels = native.kernels(x.size) if x.dtype == _F32 else None
    if kernels is not None:
        return _native_forward(kernels, x, gamma, beta, epsilon)
    rows = _rows(x)
    d = rows.shape[1]
    mean = np.add.reduce(rows, axis=1, keepdims=True)
    mean /= d
    out = np.subtract(rows, mean)
    var = _row_dot(out, out)
    var /= d
    var += x.dtype.type(epsilon)
    rstd = np.sqrt(var, out=var)
    np.reciprocal(rstd, out=rstd)
    out *= rstd
    if gamma is not None:
        out *= gamma
    if beta is not None:
        out += beta
    stats = x.shape[:-1] + (1,)
    return out.reshape(x.shape), mean.reshape(stats), rstd.reshape(stats)


@quietly
def layer_norm_backward(x, gamma, mean, rstd, grad, need_x, need_gamma, need_beta):
    """See :meth:`ember.backend.base.Backend.layer_norm_backward`. With ``xhat = (x - mean)
    rstd`` and ``h = grad * gamma``: ``dx = rstd (h - mean(h) - xhat mean(h xhat))``,
    ``dgamma = sum(grad xhat)``, ``dbeta = sum(grad)`` over the rows."""
    if x.dtype not in _FLOATS or grad.dtype != x.dtype:
        return NotImplemented
    kernels = native.kernels(x.size) if x.dtype == _F32 else None
    if kernels is not None:
        return _native_backward(kernels, x, gamma, mean, rstd, grad, need_x, need_gamma, need_beta)
    rows, g = _rows(x), _rows(grad)
    d = rows.shape[1]
    m, r = mean.reshape(-1, 1), rstd.reshape(-1, 1)
    xhat = np.subtract(rows, m)
    xhat *= r
    g_gamma = np.einsum("ij,ij->j", g, xhat) if need_gamma and gamma is not None else None
    g_beta = np.add.reduce(g, axis=0) if need_beta else None
    gx = None
    if need_x:
        h = g * gamma if gamma is not None else g.copy()
        a = np.add.reduce(h, axis=1, keepdims=True)
        a /= d
        b = _row_dot(h, xhat)
        b /= d
        xhat *= b
        h -= a
        h -= xhat
        h *= r
        gx = h.reshape(x.shape)
    return gx, g_gamma, g_beta


@quietly
def rms_norm(x, gamma, epsilon):
    """See :meth:`ember.backend.base.Backend.rms_norm` (numpy, in place where it can: a
    row's sum of squares, ``rstd``, the scaled rows)."""
    if x.dtype not in _FLOATS or x.ndim == 0 or x.shape[-1] == 0:
        return NotImplemented
    if gamma is not None and gamma.dtype != x.dtype:
        return NotImplemented
    rows = _rows(x)
    rstd = _row_dot(rows, rows)
    rstd /= rows.shape[1]
    rstd += x.dtype.type(epsilon)
    np.sqrt(rstd, out=rstd)
    np.reciprocal(rstd, out=rstd)
    out = rows * rstd
    if gamma is not None:
        out *= gamma
    return out.reshape(x.shape), rstd.reshape(x.shape[:-1] + (1,))


@quietly
def rms_norm_backward(x, gamma, rstd, grad, need_x, need_gamma):
    """See :meth:`ember.backend.base.Backend.rms_norm_backward`. With ``xhat = x rstd``
    and ``h = grad * gamma``: ``dx = rstd (h - xhat mean(h xhat))``, ``dgamma = sum(grad
    xhat)`` over the rows."""
    if x.dtype not in _FLOATS or grad.dtype != x.dtype:
        return NotImplemented
    rows, g = _rows(x), _rows(grad)
    r = rstd.reshape(-1, 1)
    xhat = rows * r
    g_gamma = np.einsum("ij,ij->j", g, xhat) if need_gamma and gamma is not None else None
    gx = None
    if need_x:
        h = g * gamma if gamma is not None else g.copy()
        b = _row_dot(h, xhat)
        b /= rows.shape[1]
        xhat *= b
        h -= xhat
        h *= r
        gx = h.reshape(x.shape)
    return gx, g_gamma
