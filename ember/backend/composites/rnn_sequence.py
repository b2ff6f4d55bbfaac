"""The recurrent sequences: one LSTM or GRU direction over a whole (time-major)
sequence, and their backward passes.

Forward, per step ``t`` (from last to first with ``reverse``): the hidden product
``h @ w_hh`` added to the step's input projection, then the cell
(:mod:`ember.backend.composites.rnn`, through :func:`run`, so a backend's cell kernel
still serves). Where ``valid`` (bool ``[S, B, 1]``) is false the states are kept and
the output is zero. The backward walks the steps the other way, computing each
step's gate gradients ``dZ_t`` and ``dh = dZ_t w_hh^T``, and forms the weight's
gradient as one product ``H^T dZ`` over all steps at the end (``H`` the states
entering each step).
"""

from __future__ import annotations

from typing import Any

from ember.backend.composites.registry import composite, run
from ember.backend.ops import BinaryOp, ReduceOp

_ADD, _MUL = BinaryOp.ADD, BinaryOp.MUL


def order(steps: int, reverse: bool) -> range:
    """The steps in the order the forward runs them."""
    return range(steps - 1, -1, -1) if reverse else range(steps)


def step(ops: Any, x: Any, t: int) -> Any:
    """``x[t]`` of a time-major ``[S, B, G]`` value, as ``[B, G]``."""
    _, b, g = x.shape
    return ops.reshape(ops.slice(x, ((t, t + 1, 1), (0, b, 1), (0, g, 1))), (b, g))


def stack(ops: Any, steps: list[Any]) -> Any:
    """``[S, B, G]`` from ``S`` values ``[B, G]``."""
    b, g = steps[0].shape
    return ops.cat([ops.reshape(v, (1, b, g)) for v in steps], 0)


def _keep(ops: Any, valid: Any, t: int, new: Any, old: Any) -> tuple[Any, Any]:
    """``(state, output)`` of step ``t``: ``new`` where the step is real, else ``old`` and zero."""
    if valid is None:
        return new, new
    m = step(ops, valid, t)
    return ops.where(m, new, old), ops.where(m, new, 0.0)


def _split(ops: Any, valid: Any, t: int, grad: Any, grad_y: Any = None) -> tuple[Any, Any]:
    """``(to the cell, past it)``: the gradient of step ``t``'s new state (``grad``, plus
    the output's ``grad_y[t]``) where the step is real, and ``grad`` where it is padding
    (the state passes through; the zero output takes no gradient)."""
    to = grad if grad_y is None else ops.binary(_ADD, grad, step(ops, grad_y, t))
    if valid is None:
        return to, None
    m = step(ops, valid, t)
    return ops.where(m, to, 0.0), ops.where(m, 0.0, grad)


def _plus(ops: Any, a: Any, b: Any) -> Any:
    return a if b is None else ops.binary(_ADD, a, b)


def _weight_grad(ops: Any, h_in: Any, d_steps: Any) -> Any:
    """``H^T dZ`` over all steps: ``[H, G]``."""
    s, b, n = h_in.shape
    g = d_steps.shape[-1]
    return ops.matmul(ops.permute(ops.reshape(h_in, (s * b, n)), (1, 0)), ops.reshape(d_steps, (s * b, g)))


@composite("lstm_sequence")
def lstm_sequence(ops: Any, proj: Any, w_hh: Any, h0: Any, c0: Any, valid: Any, reverse: bool) -> tuple[Any, ...]:
    """``(y, h_n, c_n, h_in, c_in, z)`` (see ``Backend.lstm_sequence``)."""
    steps = proj.shape[0]
    h, c = h0, c0
    ys: list[Any] = [None] * steps
    h_in, c_in, zs = list(ys), list(ys), list(ys)
    for t in order(steps, reverse):
        h_in[t], c_in[t] = h, c
        zs[t] = ops.binary(_ADD, step(ops, proj, t), ops.matmul(h, w_hh))
        h_new, c_new = run(ops, "lstm_cell", zs[t], c)
        c, _ = _keep(ops, valid, t, c_new, c)
        h, ys[t] = _keep(ops, valid, t, h_new, h)
    return stack(ops, ys), h, c, stack(ops, h_in), stack(ops, c_in), stack(ops, zs)


@composite("lstm_sequence_backward")
def lstm_sequence_backward(
    ops: Any,
    w_hh: Any,
    valid: Any,
    reverse: bool,
    h_in: Any,
    c_in: Any,
    c_n: Any,
    z: Any,
    grad_y: Any,
    grad_h: Any,
    grad_c: Any,
) -> tuple[Any, Any, Any, Any]:
    """``(d proj, d w_hh, d h0, d c0)`` (see ``Backend.lstm_sequence_backward``). The
    state after step ``t`` stands for its ``c'``: they differ only at padded steps,
    where no gradient reaches the cell."""
    steps = z.shape[0]
    zero = ops.binary(_MUL, c_n, 0.0)
    dh = zero if grad_h is None else grad_h
    dc = zero if grad_c is None else grad_c
    w_t = ops.permute(w_hh, (1, 0))
    runs = list(order(steps, reverse))
    d_z: list[Any] = [None] * steps
    for k in range(steps - 1, -1, -1):
        t = runs[k]
        c_after = c_n if k == steps - 1 else step(ops, c_in, runs[k + 1])
        to_h, past_h = _split(ops, valid, t, dh, grad_y)
        to_c, past_c = _split(ops, valid, t, dc)
        d_z[t], dc_prev = run(ops, "lstm_cell_backward", step(ops, z, t), step(ops, c_in, t), c_after, to_h, to_c)
        dh = _plus(ops, ops.matmul(d_z[t], w_t), past_h)
        dc = _plus(ops, dc_prev, past_c)
    d_proj = stack(ops, d_z)
    return d_proj, _weight_grad(ops, h_in, d_proj), dh, dc


@composite("gru_sequence")
def gru_sequence(ops: Any, proj: Any, w_hh: Any, b_hh: Any, h0: Any, valid: Any, reverse: bool) -> tuple[Any, ...]:
    """``(y, h_n, h_in, hp)`` (see ``Backend.gru_sequence``)."""
    steps = proj.shape[0]
    h = h0
    ys: list[Any] = [None] * steps
    h_in, hps = list(ys), list(ys)
    for t in order(steps, reverse):
        h_in[t] = h
        hp = ops.matmul(h, w_hh)
        hps[t] = hp if b_hh is None else ops.binary(_ADD, hp, b_hh)
        h, ys[t] = _keep(ops, valid, t, run(ops, "gru_cell", step(ops, proj, t), hps[t], h), h)
    return stack(ops, ys), h, stack(ops, h_in), stack(ops, hps)


@composite("gru_sequence_backward")
def gru_sequence_backward(
    ops: Any, w_hh: Any, valid: Any, reverse: bool, proj: Any, h_in: Any, hp: Any, grad_y: Any, grad_h: Any
) -> tuple[Any, Any, Any, Any]:
    """``(d proj, d w_hh, d b_hh, d h0)`` (see ``Backend.gru_sequence_backward``)."""
    steps = proj.shape[0]
    dh = ops.binary(_MUL, step(ops, h_in, 0), 0.0) if grad_h is None else grad_h
    w_t = ops.permute(w_hh, (1, 0))
    d_xp: list[Any] = [None] * steps
    d_hp: list[Any] = [None] * steps
    for t in reversed(order(steps, reverse)):
        to_h, past_h = _split(ops, valid, t, dh, grad_y)
        d_xp[t], d_hp[t], d_h = run(
            ops, "gru_cell_backward", step(ops, proj, t), step(ops, hp, t), step(ops, h_in, t), to_h
        )
        dh = _plus(ops, ops.binary(_ADD, ops.matmul(d_hp[t], w_t), d_h), past_h)
    d_hps = stack(ops, d_hp)
    s, b, g = d_hps.shape
    d_b = ops.reshape(ops.reduce(ReduceOp.SUM, ops.reshape(d_hps, (s * b, g)), 0), (g,))
    return stack(ops, d_xp), _weight_grad(ops, h_in, d_hps), d_b, dh
