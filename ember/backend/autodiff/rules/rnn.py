"""The fused recurrent cells: forward recording and backward steps side by side.

One call records one function node with two outputs (``h'`` and ``c'``, see
:mod:`ember.backend.autodiff.rules.custom`); its backward is one call of the inner
backend's ``lstm_cell_backward``, or the composite below, over the protocol, where
the inner backend has none or the backward itself is differentiated (``create_graph``).
The GRU cell has one output: an ordinary node over its three inputs.
"""

from __future__ import annotations

from typing import Any

from ember.backend.autodiff.graph import AutodiffTensor
from ember.backend.autodiff.rules.common import RecordMixin
from ember.backend.ops import BinaryOp, UnaryOp

_ADD, _MUL = BinaryOp.ADD, BinaryOp.MUL


def lstm_cell_backward_composite(ops: Any, gates: Any, c: Any, c_new: Any, grad_h: Any, grad_c: Any) -> list[Any]:
    """``[d gates, d c]`` of ``Backend.lstm_cell`` over the primitives of ``ops``."""
    n = c.shape[-1]
    last = len(gates.shape) - 1

    def quarter(k: int) -> Any:
        lead = tuple((0, size, 1) for size in gates.shape[:-1])
        return ops.slice(gates, (*lead, (k * n, (k + 1) * n, 1)))

    def sigmoid(z: Any) -> Any:
        return ops.binary(_ADD, ops.binary(_MUL, ops.unary(UnaryOp.TANH, ops.binary(_MUL, z, 0.5)), 0.5), 0.5)

    def one_minus(v: Any) -> Any:
        return ops.binary(_ADD, ops.unary(UnaryOp.NEG, v), 1.0)

    i, f, o = sigmoid(quarter(0)), sigmoid(quarter(1)), sigmoid(quarter(3))
    g = ops.unary(UnaryOp.TANH, quarter(2))
    dc = grad_c
    if grad_h is not None:
        tc = ops.unary(UnaryOp.TANH, c_new)
        d_o = ops.binary(_MUL, ops.binary(_MUL, grad_h, tc), ops.binary(_MUL, o, one_minus(o)))
        through_h = ops.binary(_MUL, ops.binary(_MUL, grad_h, o), one_minus(ops.binary(_MUL, tc, tc)))
        dc = through_h if dc is None else ops.binary(_ADD, dc, through_h)
    else:
        d_o = ops.binary(_MUL, o, 0.0)
    if dc is None:
        dc = ops.binary(_MUL, c, 0.0)
    d_i = ops.binary(_MUL, ops.binary(_MUL, dc, g), ops.binary(_MUL, i, one_minus(i)))
    d_f = ops.binary(_MUL, ops.binary(_MUL, dc, c), ops.binary(_MUL, f, one_minus(f)))
    d_g = ops.binary(_MUL, ops.binary(_MUL, dc, i), one_minus(ops.binary(_MUL, g, g)))
    return [ops.cat([d_i, d_f, d_g, d_o], last), ops.binary(_MUL, dc, f)]


def gru_cell_backward_composite(ops: Any, xp: Any, hp: Any, h: Any, grad: Any) -> tuple[Any, Any, Any]:
    """``(d xp, d hp, d h)`` of ``Backend.gru_cell`` over the primitives of ``ops``."""
    n = h.shape[-1]
    last = len(xp.shape) - 1
    lead = tuple((0, size, 1) for size in xp.shape[:-1])

    def part(v: Any, k: int) -> Any:
        return ops.slice(v, (*lead, (k * n, (k + 1) * n, 1)))

    def sigmoid(v: Any) -> Any:
        return ops.binary(_ADD, ops.binary(_MUL, ops.unary(UnaryOp.TANH, ops.binary(_MUL, v, 0.5)), 0.5), 0.5)

    def one_minus(v: Any) -> Any:
        return ops.binary(_ADD, ops.unary(UnaryOp.NEG, v), 1.0)

    r, z = sigmoid(ops.binary(_ADD, part(xp, 0), part(hp, 0))), sigmoid(ops.binary(_ADD, part(xp, 1), part(hp, 1)))
    hp_n = part(hp, 2)
    new = ops.unary(UnaryOp.TANH, ops.binary(_ADD, part(xp, 2), ops.binary(_MUL, r, hp_n)))
    d_n = ops.binary(_MUL, ops.binary(_MUL, grad, one_minus(z)), one_minus(ops.binary(_MUL, new, new)))
    d_r = ops.binary(_MUL, ops.binary(_MUL, d_n, hp_n), ops.binary(_MUL, r, one_minus(r)))
    diff = ops.binary(_ADD, h, ops.unary(UnaryOp.NEG, new))
    d_z = ops.binary(_MUL, ops.binary(_MUL, grad, diff), ops.binary(_MUL, z, one_minus(z)))
    d_xp = ops.cat([d_r, d_z, d_n], last)
    d_hp = ops.cat([d_r, d_z, ops.binary(_MUL, d_n, r)], last)
    return d_xp, d_hp, ops.binary(_MUL, grad, z)


def _gru_cell_step(ops: Any, g: Any, saved: tuple, ctx: Any) -> tuple[Any, Any, Any]:
    xp, hp, h = saved
    out = ops.gru_cell_backward(xp, hp, h, g)
    if out is NotImplemented:  # a create_graph pass (ops is autodiff) or no kernel
        return gru_cell_backward_composite(ops, xp, hp, h, g)
    return out


class RnnRules(RecordMixin):
    """Recording of the fused LSTM cell (the inputs and ``c'`` are kept) and GRU cell
    (the inputs are kept)."""

    def gru_cell(self, xp: AutodiffTensor, hp: AutodiffTensor, h: AutodiffTensor) -> Any:
        out = self.inner.gru_cell(xp.inner, hp.inner, h.inner)
        if out is NotImplemented:
            return NotImplemented
        parents = (xp.node, hp.node, h.node)
        if all(p is None for p in parents):
            return AutodiffTensor(out, None)
        return self._record(out, parents, _gru_cell_step, (self._keep(xp), self._keep(hp), self._keep(h)), None)

    def lstm_cell(self, gates: AutodiffTensor, c: AutodiffTensor) -> Any:
        result = self.inner.lstm_cell(gates.inner, c.inner)
        if result is NotImplemented:
            return NotImplemented
        h, c_new = result
        inner = self.inner

        def backward(grads: list[Any], values: list[Any], create_graph: bool) -> list[Any]:
            grad_h, grad_c = grads
            z, c_old, c_next = values
            if create_graph:  # differentiable: the composite over this backend
                return lstm_cell_backward_composite(self, z, c_old, c_next, grad_h, grad_c)
            out = inner.lstm_cell_backward(z, c_old, c_next, grad_h, grad_c)
            if out is NotImplemented:
                return lstm_cell_backward_composite(inner, z, c_old, c_next, grad_h, grad_c)
            return list(out)

        h_out, c_out = self.custom([gates, c], [(h, True), (c_new, True)], [gates, c, 1], backward)  # type: ignore[attr-defined]
        return h_out, c_out
