"""flex's recurrent sequences (``Backend.lstm_sequence``, ``gru_sequence`` and their
backward passes): one direction of one layer over all steps in one call.

Unmasked float32 runs the whole loop in one native call where the hidden size suits
the inline product (:mod:`ember.backend.flex.native_sequence`). Otherwise per step one
``h @ w_hh`` GEMM (written straight into the step's slot of the saved gates) and one cell call (:mod:`ember.backend.flex.lstm_cell`: native loops for
float32, :mod:`ember.backend.flex.gru_cell`); the backward's per-step work is the
cell's backward and one ``dZ_t @ w_hh^T``, and the hidden weight's gradient is one
GEMM over all steps at the end. float32 and float64; other dtypes take the composite
(:mod:`ember.backend.composites.rnn_sequence`).
"""

from __future__ import annotations

import numpy as np

from ember.backend.flex import gru_cell as gru
from ember.backend.flex import lstm_cell as lstm
from ember.backend.flex import native, native_gemm, native_sequence
from ember.backend.flex.quiet import quietly

_FLOATS = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
_F32 = np.dtype(np.float32)


def _order(steps: int, reverse: bool) -> range:
    return range(steps - 1, -1, -1) if reverse else range(steps)


def _usable(proj: np.ndarray, w_hh: np.ndarray, *others: np.ndarray | None) -> bool:
    dtype = proj.dtype
    return (
        dtype in _FLOATS
        and proj.ndim == 3
        and w_hh.dtype == dtype
        and w_hh.ndim == 2
        and w_hh.shape[1] == proj.shape[2]
        and all(a is None or a.dtype == dtype for a in others)
    )


def _state_grad(grad: np.ndarray | None, like: np.ndarray) -> np.ndarray:
    """A fresh C-contiguous copy of a state's gradient (zeros where none reached it)."""
    if grad is None:
        return np.zeros(like.shape, like.dtype)
    return np.array(grad, dtype=like.dtype, order="C", copy=True)


def _weight_grad(h_in: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``H^T dZ`` over all steps (one GEMM: float32 inline where it applies)."""
    s, b, n = h_in.shape
    h_rows, d_rows = h_in.reshape(s * b, n), d.reshape(s * b, d.shape[-1])
    inline = native_gemm.matmul(h_rows.T, d_rows)
    return inline if inline is not None else h_rows.T @ d_rows


def _recur(proj, w_hh, states, valid, reverse, gates, cell):
    """The forward recurrence both cells share: per step ``t`` (in run order) the
    states entering it are saved, ``h @ w_hh`` (``h`` the first state) is written into
    ``gates[t]``, and ``cell(t, states)`` gives the new states, ``h'`` first; ``y[t]``
    is ``h'``. Rows that ``valid`` marks padded keep their states and output 0.
    Returns ``y``, the final states and the saved ones (``[steps, batch, n]`` each)."""
    steps, batch, _ = proj.shape
    y = np.empty((steps, batch, states[0].shape[-1]), proj.dtype)
    saved = [np.empty_like(y) for _ in states]
    states = [np.ascontiguousarray(s) for s in states]
    for t in _order(steps, reverse):
        for into, state in zip(saved, states):
            into[t] = state
        np.matmul(states[0], w_hh, out=gates[t])
        new = cell(t, states)
        if valid is None:
            y[t] = new[0]
            states = list(new)
        else:
            m = valid[t]
            y[t] = np.where(m, new[0], 0)
            states = [np.where(m, a, s) for a, s in zip(new, states)]
    return y, states, saved


@quietly
def lstm_sequence(proj, w_hh, h0, c0, valid, reverse):
    """See ``Backend.lstm_sequence``."""
    if not _usable(proj, w_hh, h0, c0) or proj.shape[2] != 4 * h0.shape[-1]:
        return NotImplemented
    z = np.empty_like(proj)
    kernels = native.kernels(proj.shape[1] * proj.shape[2]) if proj.dtype == _F32 and valid is None else None
    if kernels is not None:
        proj, h0 = np.ascontiguousarray(proj), np.ascontiguousarray(h0)
        whole = native_sequence.lstm_forward(kernels, proj, w_hh, h0, c0, reverse)
        return whole if whole is not None else _lstm_native(kernels, proj, w_hh, h0, c0, reverse, z)

    def cell(t, states):
        z[t] += proj[t]
        return lstm.lstm_cell(z[t], states[1])

    y, (h, c), (h_in, c_in) = _recur(proj, w_hh, [h0, c0], valid, reverse, z, cell)
    return y, h, c, h_in, c_in, z


def _lstm_native(kernels, proj, w_hh, h0, c0, reverse, z):
    """The unmasked float32 forward with the native cell, called by address: per step
    one GEMM, one add and one kernel call; the cell writes ``c'`` straight into the
    next step's ``c_in`` and ``h'`` into ``y``, which is ``h_in`` shifted by one step."""
    steps, batch, n = z.shape[0], z.shape[1], h0.shape[-1]
    y = np.empty((steps, batch, n), z.dtype)
    h_in, c_in = np.empty_like(y), np.empty_like(y)
    runs = list(_order(steps, reverse))
    c_n = np.empty_like(c0)
    c_in[runs[0]] = c0
    za, ya, ca = native.address(z), native.address(y), native.address(c_in)
    z_step, s_step = z[0].nbytes, y[0].nbytes
    h = h0
    for k, t in enumerate(runs):
        np.matmul(h, w_hh, out=z[t])
        z[t] += proj[t]
        c_next = native.address(c_n) if k + 1 == steps else ca + runs[k + 1] * s_step
        kernels.lstm_cell(za + t * z_step, ca + t * s_step, ya + t * s_step, c_next, batch, n)
        h = y[t]
    h_in[runs[0]] = h0
    if steps > 1:
        h_in[runs[1:]] = y[runs[:-1]]
    return y, y[runs[-1]].copy(), c_n, h_in, c_in, z


def _lstm_backward_native(kernels, w_t, runs, c_in, c_n, z, grad_y, dh, dc):
    """The unmasked float32 backward with the native cell, called by address: per step
    at most one add, one kernel call and one GEMM (``dh = dZ_t w_hh^T``)."""
    steps, batch, n = c_in.shape
    d_z = np.empty_like(z)
    to_h, dc_other = np.empty_like(dh), np.empty_like(dc)
    za, dza, ca = native.address(z), native.address(d_z), native.address(c_in)
    z_step, s_step = z[0].nbytes, c_in[0].nbytes
    dh_at, to_h_at = native.address(dh), native.address(to_h)
    dc_at, other_at = native.address(dc), native.address(dc_other)
    for k in range(steps - 1, -1, -1):
        t = runs[k]
        c_after = native.address(c_n) if k == steps - 1 else ca + runs[k + 1] * s_step
        gh_at = dh_at
        if grad_y is not None:
            np.add(dh, grad_y[t], out=to_h)
            gh_at = to_h_at
        kernels.lstm_cell_backward(
            za + t * z_step, ca + t * s_step, c_after, gh_at, dc_at, dza + t * z_step, other_at, batch, n
        )
        dc, dc_other, dc_at, other_at = dc_other, dc, other_at, dc_at
        np.matmul(d_z[t], w_t, out=dh)
    return d_z, dh, dc


@quietly
def lstm_sequence_backward(w_hh, valid, reverse, h_in, c_in, c_n, z, grad_y, grad_h, grad_c):
    """See ``Backend.lstm_sequence_backward``."""
    if not _usable(z, w_hh, h_in, c_in, c_n, grad_y, grad_h, grad_c):
        return NotImplemented
    steps = z.shape[0]
    dh = _state_grad(grad_h, c_n)
    dc = _state_grad(grad_c, c_n)
    w_t = np.ascontiguousarray(w_hh.T)
    runs = list(_order(steps, reverse))
    kernels = native.kernels(z[0].size) if z.dtype == _F32 and valid is None else None
    if kernels is not None:
        c_n, c_in, z = (np.ascontiguousarray(a) for a in (c_n, c_in, z))
        whole = native_sequence.lstm_backward(kernels, w_hh, reverse, c_in, c_n, z, grad_y, dh, dc)
        d_z, dh, dc = whole or _lstm_backward_native(kernels, w_t, runs, c_in, c_n, z, grad_y, dh, dc)
        return d_z, _weight_grad(h_in, d_z), dh, dc
    d_z = np.empty_like(z)
    for k in range(steps - 1, -1, -1):
        t = runs[k]
        c_after = c_n if k == steps - 1 else c_in[runs[k + 1]]  # the cell's c' wherever a gradient reaches it
        to_h = dh if grad_y is None else dh + grad_y[t]
        if valid is None:
            d, dc = lstm.lstm_cell_backward(z[t], c_in[t], c_after, to_h, dc)
            d_z[t] = d
            dh = d_z[t] @ w_t
            continue
        m = valid[t]
        d, dc_cell = lstm.lstm_cell_backward(z[t], c_in[t], c_after, np.where(m, to_h, 0), np.where(m, dc, 0))
        d_z[t] = d
        dh = np.where(m, d_z[t] @ w_t, dh + d_z[t] @ w_t)
        dc = np.where(m, dc_cell, dc + dc_cell)
    return d_z, _weight_grad(h_in, d_z), dh, dc


@quietly
def gru_sequence(proj, w_hh, b_hh, h0, valid, reverse):
    """See ``Backend.gru_sequence``."""
    if not _usable(proj, w_hh, b_hh, h0) or proj.shape[2] != 3 * h0.shape[-1]:
        return NotImplemented
    hp = np.empty_like(proj)

    def cell(t, states):
        if b_hh is not None:
            hp[t] += b_hh
        return (gru.gru_cell(proj[t], hp[t], states[0]),)

    y, (h,), (h_in,) = _recur(proj, w_hh, [h0], valid, reverse, hp, cell)
    return y, h, h_in, hp


@quietly
def gru_sequence_backward(w_hh, valid, reverse, proj, h_in, hp, grad_y, grad_h):
    """See ``Backend.gru_sequence_backward``."""
    if not _usable(proj, w_hh, h_in, hp, grad_y, grad_h):
        return NotImplemented
    dh = _state_grad(grad_h, h_in[0])
    w_t = np.ascontiguousarray(w_hh.T)
    d_xp, d_hp = np.empty_like(proj), np.empty_like(hp)
    for t in reversed(_order(proj.shape[0], reverse)):
        to_h = dh if grad_y is None else dh + grad_y[t]
        if valid is not None:
            to_h = np.where(valid[t], to_h, 0)
        d_xp[t], d_hp[t], d_h = gru.gru_cell_backward(proj[t], hp[t], h_in[t], to_h)
        d_h += d_hp[t] @ w_t
        dh = d_h if valid is None else np.where(valid[t], d_h, dh + d_h)
    g = hp.shape[-1]
    return d_xp, _weight_grad(h_in, d_hp), d_hp.reshape(-1, g).sum(0), dh
