"""The recurrent cells: one LSTM or GRU state update from the gates' pre-activations,
and their backward steps. The sigmoid gates are ``(tanh(z / 2) + 1) / 2`` (finite
everywhere), as the kernels."""

from __future__ import annotations

from typing import Any

from ember.backend.composites.registry import composite
from ember.backend.ops import BinaryOp, UnaryOp

_ADD, _MUL, _SUB = BinaryOp.ADD, BinaryOp.MUL, BinaryOp.SUB


def sigmoid(ops: Any, z: Any) -> Any:
    return ops.binary(_MUL, ops.binary(_ADD, ops.unary(UnaryOp.TANH, ops.binary(_MUL, z, 0.5)), 1.0), 0.5)


def one_minus(ops: Any, v: Any) -> Any:
    return ops.binary(_ADD, ops.unary(UnaryOp.NEG, v), 1.0)


def part(ops: Any, x: Any, k: int, n: int) -> Any:
    """The ``k``-th block of ``n`` columns of ``x`` (along its last dim)."""
    lead = tuple((0, size, 1) for size in x.shape[:-1])
    return ops.slice(x, (*lead, (k * n, (k + 1) * n, 1)))


def lstm_gates(ops: Any, gates: Any, n: int) -> tuple[Any, Any, Any, Any]:
    """``(i, f, g, o)``: the activated gates of ``gates`` ``[..., 4n]``."""
    i, f, o = (sigmoid(ops, part(ops, gates, k, n)) for k in (0, 1, 3))
    return i, f, ops.unary(UnaryOp.TANH, part(ops, gates, 2, n)), o


@composite("lstm_cell")
def lstm_cell(ops: Any, gates: Any, c: Any) -> tuple[Any, Any]:
    """``(h', c')``: ``c' = sigmoid(f) c + sigmoid(i) tanh(g)``, ``h' = sigmoid(o) tanh(c')``."""
    i, f, g, o = lstm_gates(ops, gates, c.shape[-1])
    c_new = ops.binary(_ADD, ops.binary(_MUL, f, c), ops.binary(_MUL, i, g))
    return ops.binary(_MUL, o, ops.unary(UnaryOp.TANH, c_new)), c_new


@composite("lstm_cell_backward")
def lstm_cell_backward(ops: Any, gates: Any, c: Any, c_new: Any, grad_h: Any, grad_c: Any) -> list[Any]:
    """``[d gates, d c]`` of :func:`lstm_cell` (``grad_h``/``grad_c`` may be ``None``)."""
    i, f, g, o = lstm_gates(ops, gates, c.shape[-1])
    dc = grad_c
    if grad_h is not None:
        tc = ops.unary(UnaryOp.TANH, c_new)
        d_o = ops.binary(_MUL, ops.binary(_MUL, grad_h, tc), ops.binary(_MUL, o, one_minus(ops, o)))
        through_h = ops.binary(_MUL, ops.binary(_MUL, grad_h, o), one_minus(ops, ops.binary(_MUL, tc, tc)))
        dc = through_h if dc is None else ops.binary(_ADD, dc, through_h)
    else:
        d_o = ops.binary(_MUL, o, 0.0)
    if dc is None:
        dc = ops.binary(_MUL, c, 0.0)
    d_i = ops.binary(_MUL, ops.binary(_MUL, dc, g), ops.binary(_MUL, i, one_minus(ops, i)))
    d_f = ops.binary(_MUL, ops.binary(_MUL, dc, c), ops.binary(_MUL, f, one_minus(ops, f)))
    d_g = ops.binary(_MUL, ops.binary(_MUL, dc, i), one_minus(ops, ops.binary(_MUL, g, g)))
    return [ops.cat([d_i, d_f, d_g, d_o], len(gates.shape) - 1), ops.binary(_MUL, dc, f)]


def _gru_gates(ops: Any, xp: Any, hp: Any, n: int) -> tuple[Any, Any, Any, Any]:
    """``(r, z, new, hp_n)`` of one GRU step."""
    r = sigmoid(ops, ops.binary(_ADD, part(ops, xp, 0, n), part(ops, hp, 0, n)))
    z = sigmoid(ops, ops.binary(_ADD, part(ops, xp, 1, n), part(ops, hp, 1, n)))
    hp_n = part(ops, hp, 2, n)
    new = ops.unary(UnaryOp.TANH, ops.binary(_ADD, part(ops, xp, 2, n), ops.binary(_MUL, r, hp_n)))
    return r, z, new, hp_n


@composite("gru_cell")
def gru_cell(ops: Any, xp: Any, hp: Any, h: Any) -> Any:
    """``h' = n + z (h - n)`` with ``r, z = sigmoid(xp + hp)``, ``n = tanh(xp_n + r hp_n)``."""
    _, z, new, _ = _gru_gates(ops, xp, hp, h.shape[-1])
    return ops.binary(_ADD, new, ops.binary(_MUL, z, ops.binary(_SUB, h, new)))


@composite("gru_cell_backward")
def gru_cell_backward(ops: Any, xp: Any, hp: Any, h: Any, grad: Any) -> tuple[Any, Any, Any]:
    """``(d xp, d hp, d h)`` of :func:`gru_cell`."""
    r, z, new, hp_n = _gru_gates(ops, xp, hp, h.shape[-1])
    d_n = ops.binary(_MUL, ops.binary(_MUL, grad, one_minus(ops, z)), one_minus(ops, ops.binary(_MUL, new, new)))
    d_r = ops.binary(_MUL, ops.binary(_MUL, d_n, hp_n), ops.binary(_MUL, r, one_minus(ops, r)))
    diff = ops.binary(_SUB, h, new)
    d_z = ops.binary(_MUL, ops.binary(_MUL, grad, diff), ops.binary(_MUL, z, one_minus(ops, z)))
    last = len(xp.shape) - 1
    d_xp = ops.cat([d_r, d_z, d_n], last)
    d_hp = ops.cat([d_r, d_z, ops.binary(_MUL, d_n, r)], last)
    return d_xp, d_hp, ops.binary(_MUL, grad, z)
