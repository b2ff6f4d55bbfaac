"""flex's fused GRU cell (PyTorch's ``reset_after`` form), forward and backward, with
numpy: one call per time step in place of about ten elementwise ops and their autodiff
nodes. The backward recomputes the gates from the saved projections. float32 and
float64; other dtypes take the composite (``ember.tensor.rnn_cell``)."""

from __future__ import annotations

import numpy as np

from ember.backend.flex.quiet import quietly

_FLOATS = frozenset({np.dtype(np.float32), np.dtype(np.float64)})


def _usable(xp: np.ndarray, hp: np.ndarray, h: np.ndarray) -> bool:
    return (
        xp.dtype in _FLOATS
        and hp.dtype == xp.dtype
        and h.dtype == xp.dtype
        and xp.shape == hp.shape
        and xp.shape[:-1] == h.shape[:-1]
        and xp.shape[-1] == 3 * h.shape[-1]
    )


def _gates(xp: np.ndarray, hp: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rz, new, hp_n)``: the reset and update gates ``[..., 2H]``, the new gate."""
    rz = np.add(xp[..., : 2 * n], hp[..., : 2 * n])
    rz *= 0.5
    np.tanh(rz, out=rz)
    rz *= 0.5
    rz += 0.5  # sigmoid, finite everywhere
    hp_n = hp[..., 2 * n :]
    new = rz[..., :n] * hp_n
    new += xp[..., 2 * n :]
    np.tanh(new, out=new)
    return rz, new, hp_n


@quietly
def gru_cell(xp: np.ndarray, hp: np.ndarray, h: np.ndarray):
    """``h'`` of one step (see ``Backend.gru_cell``); ``NotImplemented`` for other dtypes or shapes."""
    if not _usable(xp, hp, h):
        return NotImplemented
    n = h.shape[-1]
    rz, new, _ = _gates(xp, hp, n)
    out = np.subtract(h, new)
    out *= rz[..., n:]
    out += new
    return out


@quietly
def gru_cell_backward(xp: np.ndarray, hp: np.ndarray, h: np.ndarray, grad: np.ndarray):
    """``(d xp, d hp, d h)`` of one step (see ``Backend.gru_cell_backward``)."""
    if not _usable(xp, hp, h) or grad.shape != h.shape:
        return NotImplemented
    n = h.shape[-1]
    rz, new, hp_n = _gates(xp, hp, n)
    r, z = rz[..., :n], rz[..., n:]
    d_xp = np.empty_like(xp)
    d_r, d_z, d_n = d_xp[..., :n], d_xp[..., n : 2 * n], d_xp[..., 2 * n :]
    np.multiply(grad, 1.0 - z, out=d_n)
    d_n *= 1.0 - new * new  # through tanh
    np.multiply(d_n, hp_n, out=d_r)
    d_r *= r * (1.0 - r)
    np.subtract(h, new, out=d_z)
    d_z *= grad
    d_z *= z * (1.0 - z)
    d_hp = d_xp.copy()
    d_hp[..., 2 * n :] *= r
    return d_xp, d_hp, grad * z
