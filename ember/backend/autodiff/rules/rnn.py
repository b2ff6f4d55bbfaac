"""The fused LSTM cell: forward recording and backward step side by side.

One call records one function node with two outputs (``h'`` and ``c'``, see
:mod:`ember.backend.autodiff.rules.custom`); its backward is one call of the inner
backend's ``lstm_cell_backward``, or the composite below, over the protocol, where
the inner backend has none or the backward itself is differentiated (``create_graph``).
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


class RnnRules(RecordMixin):
    """Recording of the fused LSTM cell (the inputs and ``c'`` are kept)."""

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
