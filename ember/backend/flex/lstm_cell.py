"""flex's fused LSTM cell, forward and backward: one call per time step in place of a
dozen elementwise ops (and their autodiff nodes).

The sigmoid gates are ``0.5 tanh(z / 2) + 0.5`` (finite everywhere, one ``tanh`` over
the four gates' pre-activations); the backward recomputes the activations from the
saved pre-activations rather than keeping four more arrays per step. float32 runs
as native loops (:mod:`ember.backend.flex.native_rnn`) where the step is large enough
(``native.MIN_ELEMENTS`` gate values), else, as float64, with numpy; other dtypes take
the composite (``ember.tensor.rnn_cell``).
"""

from __future__ import annotations

import numpy as np

from ember.backend.flex import native
from ember.backend.flex.quiet import quietly

_F32 = np.dtype(np.float32)

_FLOATS = frozenset({np.dtype(np.float32), np.dtype(np.float64)})


def _usable(gates: np.ndarray, c: np.ndarray) -> bool:
    return (
        gates.dtype in _FLOATS
        and c.dtype == gates.dtype
        and gates.shape[:-1] == c.shape[:-1]
        and gates.shape[-1] == 4 * c.shape[-1]
    )


def _activations(gates: np.ndarray, n: int) -> np.ndarray:
    """``[i, f, g, o]`` activated, in one new array: sigmoid on i, f, o, tanh on g."""
    act = np.multiply(gates, 0.5, dtype=gates.dtype)
    np.tanh(act, out=act)
    act *= 0.5
    act += 0.5
    np.tanh(gates[..., 2 * n : 3 * n], out=act[..., 2 * n : 3 * n])
    return act


@quietly
def lstm_cell(gates: np.ndarray, c: np.ndarray):
    """``(h', c')`` of one step (see ``Backend.lstm_cell``); ``NotImplemented`` for other
    dtypes or shapes."""
    if not _usable(gates, c):
        return NotImplemented
    n = c.shape[-1]
    kernels = native.kernels(gates.size) if gates.dtype == _F32 else None
    if kernels is not None:
        z, cs = np.ascontiguousarray(gates), np.ascontiguousarray(c)
        h, c_new = np.empty_like(cs), np.empty_like(cs)
        kernels.lstm_cell(*map(native.address, (z, cs, h, c_new)), cs.size // n, n)
        return h, c_new
    act = _activations(gates, n)
    c_new = act[..., n : 2 * n] * c
    c_new += act[..., :n] * act[..., 2 * n : 3 * n]
    h = np.tanh(c_new)
    h *= act[..., 3 * n :]
    return h, c_new


@quietly
def lstm_cell_backward(gates: np.ndarray, c: np.ndarray, c_new: np.ndarray, grad_h, grad_c):
    """``(d gates, d c)`` of one step (see ``Backend.lstm_cell_backward``)."""
    if not _usable(gates, c) or c_new.shape != c.shape:
        return NotImplemented
    n = c.shape[-1]
    kernels = native.kernels(gates.size) if gates.dtype == _F32 else None
    if kernels is not None:
        arrays = [np.ascontiguousarray(a, dtype=_F32) for a in (gates, c, c_new)]
        for grad in (grad_h, grad_c):
            arrays.append(np.zeros(c.shape, _F32) if grad is None else np.ascontiguousarray(grad, dtype=_F32))
        d, dc = np.empty_like(arrays[0]), np.empty_like(arrays[1])
        kernels.lstm_cell_backward(*map(native.address, (*arrays, d, dc)), dc.size // n, n)
        if grad_h is None:  # no gradient reached h': none for the output gate (as the numpy path)
            d[..., 3 * n :] = 0.0
        return d, dc
    act = _activations(gates, n)
    i, f, g, o = (act[..., k * n : (k + 1) * n] for k in range(4))
    d = np.empty_like(gates)
    di, df, dg, do = (d[..., k * n : (k + 1) * n] for k in range(4))
    if grad_h is None:
        dc = np.zeros_like(c) if grad_c is None else np.array(grad_c, dtype=c.dtype, copy=True)
        do[...] = 0.0
    else:
        tc = np.tanh(c_new)
        np.multiply(grad_h, tc, out=do)
        do *= o * (1.0 - o)  # d o-gate pre-activation
        dc = grad_h * o
        dc *= 1.0 - tc * tc
        if grad_c is not None:
            dc += grad_c
    np.multiply(dc, g, out=di)
    di *= i * (1.0 - i)
    np.multiply(dc, c, out=df)
    df *= f * (1.0 - f)
    np.multiply(dc, i, out=dg)
    dg *= 1.0 - g * g
    dc *= f
    return d, dc
