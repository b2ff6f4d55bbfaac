"""flex's native LSTM cell kernels as kernel-IR row programs (see
:mod:`ember.backend.flex.native`, which compiles them with its other kernels, and
:mod:`ember.backend.flex.lstm_cell`, which calls them): one pass over a step's gates
and states, forward and backward, with the flushed float32 ``exp`` (sigmoid and tanh
both from it).

A program's rows are the batch and its columns the ``n`` hidden units: the gate
pre-activations ``z`` are ``[rows, 4n]`` (input, forget, cell, output), gate ``k`` the
column block ``RowView(4, 0, 1, k)``; states are ``[rows, n]``.
"""

from __future__ import annotations

from ember.backend.kernel.exprs import Expr
from ember.backend.kernel.op_table import KernelFn
from ember.backend.kernel.row_exprs import DENSE, F32, RowExprs
from ember.backend.kernel.steps import Pass, RowProgram, RowStore, RowView
from ember.backend.ops import UnaryOp


def _gate(k: int) -> RowView:
    return RowView(4, 0, 1, k)


def _sigmoid(x: RowExprs, v: Expr) -> Expr:
    """``1 / (1 + exp(-v))``: 0 and 1 at the ends, NaN stays NaN."""
    return x.div(x.c(1.0), x.add(x.c(1.0), x.un(KernelFn.EXP_FLUSHED, x.un(UnaryOp.NEG, v))))


def _tanh(x: RowExprs, v: Expr) -> Expr:
    """``1 - 2 / (1 + exp(2 v))``: float32 arithmetic that vectorises (the op table's
    ``tanh`` widens to float64); within a few 1e-8 of ``tanh``."""
    return x.sub(x.c(1.0), x.div(x.c(2.0), x.add(x.c(1.0), x.un(KernelFn.EXP_FLUSHED, x.mul(v, x.c(2.0))))))


def _gates(x: RowExprs) -> tuple[list[Expr], tuple[Expr, ...]]:
    """The pre-activations of ``z`` (buffer 0), and ``(i, f, g, o)`` activated."""
    raw = [x.read(0, _gate(k)) for k in range(4)]
    i, f, g, o = raw
    return raw, (_sigmoid(x, i), _sigmoid(x, f), _tanh(x, g), _sigmoid(x, o))


def lstm_cell() -> RowProgram:
    """``ember_lstm_cell(z, c, h_out, c_out, rows, n)``: ``c' = f c + i g``, ``h' = o tanh(c')``."""
    x = RowExprs()
    raw, (i, f, g, o) = _gates(x)
    c = x.read(1)
    c_new = x.add(x.mul(f, c), x.mul(i, g))
    stores = [RowStore(3, DENSE, c_new), RowStore(2, DENSE, x.mul(o, _tanh(x, c_new)))]
    order = [*raw, i, f, g, o, c]  # as the hand-written kernel computed them
    return RowProgram("ember_lstm_cell", [F32] * 4, [], [Pass(stores=stores, order=order)])


def lstm_cell_backward() -> RowProgram:
    """``ember_lstm_cell_backward(z, c, c_new, grad_h, grad_c, d_z, d_c, rows, n)``: the
    gates' gradients into ``d_z`` and the incoming state's into ``d_c``."""
    x = RowExprs()
    raw, (i, f, g, o) = _gates(x)
    c = x.read(1)
    tc = _tanh(x, x.read(2))
    gh = x.read(3)
    one = x.c(1.0)
    dc = x.add(x.read(4), x.mul(x.mul(gh, o), x.sub(one, x.mul(tc, tc))))
    grads = (
        x.mul(x.mul(dc, g), x.mul(i, x.sub(one, i))),
        x.mul(x.mul(dc, c), x.mul(f, x.sub(one, f))),
        x.mul(x.mul(dc, i), x.sub(one, x.mul(g, g))),
        x.mul(x.mul(gh, tc), x.mul(o, x.sub(one, o))),
    )
    stores = [RowStore(5, _gate(k), value) for k, value in enumerate(grads)]
    stores.append(RowStore(6, DENSE, x.mul(dc, f)))
    order = [*raw, i, f, g, o, c, tc, gh, dc, *grads]  # as the hand-written kernel computed them (NaN signs)
    return RowProgram("ember_lstm_cell_backward", [F32] * 7, [], [Pass(stores=stores, order=order)])


def programs() -> list[RowProgram]:
    """The LSTM cell's programs, in :class:`~ember.backend.flex.native.Kernels` order."""
    return [lstm_cell(), lstm_cell_backward()]
