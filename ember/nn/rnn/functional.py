"""The recurrences of one direction of one recurrent layer, over fused weights.

These are the loops behind :class:`~ember.nn.Lstm`, :class:`~ember.nn.Gru` and
:class:`~ember.nn.Rnn`, written so that any other front end (an ONNX importer, a custom
cell) can call them with its own weights: gates stacked along the last axis of
``w_ih`` ``[d_input, G * d_hidden]`` and ``w_hh`` ``[d_hidden, G * d_hidden]`` (ember's
``[in, out]`` layout, the transpose of PyTorch's) in PyTorch's gate order (LSTM: input,
forget, cell, output; GRU: reset, update, new); reorder ONNX's (LSTM ``i, o, f, c``;
GRU ``z, r, h``) before the call.

``xs`` is the sequence as a list of steps in time order, each ``[..., d_input]`` (any
leading shape that broadcasts with the states', e.g. ``[batch, 1, d_input]``); the
states are ``[..., d_hidden]``. ``valid`` (one bool tensor per step, broadcasting to the
state) marks the real steps of each sequence: at a padded step the state is kept and the
output is zero. ``reverse`` walks the steps from last to first; with ``valid`` that runs
each sequence backwards from its own last real step (its padded tail keeps the initial
state). The outputs come back in time order.

Each loop computes the input projections ``x_t w_ih + b`` of all steps in one GEMM
(:mod:`ember.nn.rnn.projection`); an LSTM with the default activations and no peepholes
updates its state with one fused call per step (:func:`ember.tensor.rnn_cell.lstm_cell`),
and so does a GRU in the ``reset_after`` form with the default activations and no clip
(:func:`~ember.tensor.rnn_cell.gru_cell`). :func:`lstm_layer` and :func:`gru_layer` take
the whole sequence as one time-major tensor and run it as one fused call
(:mod:`ember.tensor.rnn_sequence`): what the layers and the direction functions use
where those defaults hold.

>>> from ember import Tensor
>>> xs = [Tensor.ones([2, 3])] * 4
>>> w_ih, w_hh = Tensor.ones([3, 8]).mul_scalar(0.1), Tensor.zeros([2, 8])
>>> outs, h, c = lstm_scan(xs, w_ih, w_hh, None, None, Tensor.zeros([2, 2]), Tensor.zeros([2, 2]))
>>> len(outs), h.dims()
(4, [2, 2])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ember.errors import ConfigError
from ember.nn.rnn.projection import input_projections
from ember.tensor import Tensor
from ember.tensor import activation as F
from ember.tensor.layer_ops import linear
from ember.tensor.rnn_cell import gru_cell, lstm_cell
from ember.tensor.rnn_sequence import gru_sequence, lstm_sequence

Activation = Callable[[Tensor], Tensor]

__all__ = ["gru_layer", "gru_scan", "lstm_layer", "lstm_scan", "rnn_scan"]


def _steps(n: int, reverse: bool) -> range:
    return range(n - 1, -1, -1) if reverse else range(n)


def _affine(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    # The fused linear op: one GEMM over the leading dims (a batched matmul's backward
    # would form one outer product per batch row and sum them).
    return linear(x, w, b)


def _clipped(z: Tensor, clip: float | None) -> Tensor:
    return z if clip is None else z.clamp(-clip, clip)


def _keep_padded(
    state: Tensor, new: Tensor, valid: Sequence[Tensor] | None, pad: Sequence[Tensor] | None, t: int
) -> tuple[Tensor, Tensor]:
    """``(next state, output)`` of step ``t``: the new state and itself where the step is
    real; the old state and zero where it is padding."""
    if valid is None or pad is None:
        return new, new
    return state.mask_where(valid[t], new), new.mask_where(pad[t], 0.0)


def _pads(valid: Sequence[Tensor] | None) -> list[Tensor] | None:
    return None if valid is None else [v.bool_not() for v in valid]


def lstm_scan(
    xs: Sequence[Tensor],
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None,
    b_hh: Tensor | None,
    h: Tensor,
    c: Tensor,
    *,
    valid: Sequence[Tensor] | None = None,
    reverse: bool = False,
    clip: float | None = None,
    activations: tuple[Activation, Activation, Activation] | None = None,
    peepholes: tuple[Tensor, Tensor, Tensor] | None = None,
) -> tuple[list[Tensor], Tensor, Tensor]:
    """One LSTM direction: ``(outputs, h, c)``. Per step, ``z = x w_ih + b_ih + h w_hh + b_hh``
    split into ``i, f, g, o``; ``c = f(f) * c + f(i) * g(g)``, ``h = f(o) * h(c)`` with
    ``activations = (f, g, h)`` (default sigmoid, tanh, tanh); ``clip`` bounds ``z``
    (ONNX's ``clip``). ``peepholes = (p_i, p_f, p_o)`` (each ``[d_hidden]``, ONNX's ``P``)
    add ``p_i * c`` and ``p_f * c`` to the input and forget gates and ``p_o * c_new`` to the
    output gate, before the clip. See the module docstring for the layouts."""
    size = h.dims()[-1]
    gate_f, cell_g, out_h = activations or (F.sigmoid, F.tanh, F.tanh)
    bias = _bias_sum(b_ih, b_hh)
    default = activations is None
    pads = _pads(valid)
    outs: list[Tensor | None] = [None] * len(xs)
    proj = input_projections(xs, w_ih, bias)
    for t in _steps(len(xs), reverse):
        z = proj[t].add(_affine(h, w_hh, None))
        if peepholes is not None:
            p_i, p_f, p_o = peepholes
            i = gate_f(_clipped(z.narrow(-1, 0, size).add(p_i.mul(c)), clip))
            f = gate_f(_clipped(z.narrow(-1, size, size).add(p_f.mul(c)), clip))
            g = cell_g(_clipped(z.narrow(-1, 2 * size, size), clip))
            c_new = f.mul(c).add(i.mul(g))
            o = gate_f(_clipped(z.narrow(-1, 3 * size, size).add(p_o.mul(c_new)), clip))
            c, _ = _keep_padded(c, c_new, valid, pads, t)
            h, outs[t] = _keep_padded(h, o.mul(out_h(c_new)), valid, pads, t)
            continue
        z = _clipped(z, clip)
        if default and z.dims()[:-1] == c.dims()[:-1]:  # one fused call (a kernel where the backend has one)
            h_new, c_new = lstm_cell(z, c)
        else:
            i, f, o = (gate_f(z.narrow(-1, k * size, size)) for k in (0, 1, 3))
            g = cell_g(z.narrow(-1, 2 * size, size))
            c_new = f.mul(c).add(i.mul(g))
            h_new = o.mul(out_h(c_new))
        c, _ = _keep_padded(c, c_new, valid, pads, t)
        h, outs[t] = _keep_padded(h, h_new, valid, pads, t)
    return [o for o in outs if o is not None], h, c


def _bias_sum(b_ih: Tensor | None, b_hh: Tensor | None) -> Tensor | None:
    return b_ih if b_hh is None else (b_hh if b_ih is None else b_ih.add(b_hh))


def lstm_layer(
    x: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None,
    b_hh: Tensor | None,
    h: Tensor,
    c: Tensor,
    *,
    valid: Tensor | None = None,
    reverse: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    """One LSTM direction (default activations) over ``x`` ``[seq, batch, d_input]``:
    ``(y [seq, batch, d_hidden], h, c)``; the states ``[batch, d_hidden]``, ``valid`` a
    bool ``[seq, batch, 1]`` mask or ``None``. The input projection is one GEMM, the
    recurrence one fused call (:func:`~ember.tensor.rnn_sequence.lstm_sequence`)."""
    return lstm_sequence(linear(x, w_ih, _bias_sum(b_ih, b_hh)), w_hh, h, c, valid, reverse)


def gru_layer(
    x: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None,
    b_hh: Tensor | None,
    h: Tensor,
    *,
    valid: Tensor | None = None,
    reverse: bool = False,
) -> tuple[Tensor, Tensor]:
    """One GRU direction (``reset_after``, default activations) over ``x`` ``[seq, batch,
    d_input]``: ``(y, h)`` as :func:`lstm_layer`
    (:func:`~ember.tensor.rnn_sequence.gru_sequence`)."""
    return gru_sequence(linear(x, w_ih, b_ih), w_hh, b_hh, h, valid, reverse)


def gru_scan(
    xs: Sequence[Tensor],
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None,
    b_hh: Tensor | None,
    h: Tensor,
    *,
    valid: Sequence[Tensor] | None = None,
    reverse: bool = False,
    reset_after: bool = True,
    clip: float | None = None,
    activations: tuple[Activation, Activation] | None = None,
) -> tuple[list[Tensor], Tensor]:
    """One GRU direction: ``(outputs, h)``. Gates ``r, z = f(x W + b_i + h U + b_h)``,
    ``n = g(x W_n + b_in + r * (h U_n + b_hn))`` (``reset_after``: PyTorch's and cuDNN's
    form, ONNX's ``linear_before_reset=1``) or ``g(x W_n + b_in + (r * h) U_n + b_hn)``,
    then ``h = (1 - z) * n + z * h``; ``activations = (f, g)`` (default sigmoid, tanh)."""
    size = h.dims()[-1]
    gate_f, new_g = activations or (F.sigmoid, F.tanh)
    w_rz, w_n = w_hh.narrow(-1, 0, 2 * size), w_hh.narrow(-1, 2 * size, size)
    b_rz = None if b_hh is None else b_hh.narrow(-1, 0, 2 * size)
    b_n = None if b_hh is None else b_hh.narrow(-1, 2 * size, size)
    pads = _pads(valid)
    outs: list[Tensor | None] = [None] * len(xs)
    proj = input_projections(xs, w_ih, b_ih)
    fused_cell = reset_after and activations is None and clip is None
    for t in _steps(len(xs), reverse):
        xp = proj[t]
        if fused_cell and xp.dims()[:-1] == h.dims()[:-1]:  # one GEMM and one fused call per step
            h, outs[t] = _keep_padded(h, gru_cell(xp, _affine(h, w_hh, b_hh), h), valid, pads, t)
            continue
        rz = gate_f(_clipped(xp.narrow(-1, 0, 2 * size).add(_affine(h, w_rz, b_rz)), clip))
        r, z = rz.narrow(-1, 0, size), rz.narrow(-1, size, size)
        xn = xp.narrow(-1, 2 * size, size)
        if reset_after:
            n = xn.add(r.mul(_affine(h, w_n, b_n)))
        else:
            n = xn.add(_affine(r.mul(h), w_n, b_n))
        n = new_g(_clipped(n, clip))
        h_new = n.add(z.mul(h.sub(n)))  # (1 - z) * n + z * h
        h, outs[t] = _keep_padded(h, h_new, valid, pads, t)
    return [o for o in outs if o is not None], h


def rnn_scan(
    xs: Sequence[Tensor],
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None,
    b_hh: Tensor | None,
    h: Tensor,
    *,
    valid: Sequence[Tensor] | None = None,
    reverse: bool = False,
    nonlinearity: str | Activation = "tanh",
    clip: float | None = None,
) -> tuple[list[Tensor], Tensor]:
    """One Elman RNN direction: ``(outputs, h)`` with ``h = act(x w_ih + b_ih + h w_hh + b_hh)``;
    ``nonlinearity`` is ``"tanh"``, ``"relu"`` or a function."""
    act = nonlinearity_of(nonlinearity)
    bias = _bias_sum(b_ih, b_hh)
    pads = _pads(valid)
    outs: list[Tensor | None] = [None] * len(xs)
    proj = input_projections(xs, w_ih, bias)
    for t in _steps(len(xs), reverse):
        h_new = act(_clipped(proj[t].add(_affine(h, w_hh, None)), clip))
        h, outs[t] = _keep_padded(h, h_new, valid, pads, t)
    return [o for o in outs if o is not None], h


NONLINEARITIES: dict[str, Activation] = {"tanh": F.tanh, "relu": F.relu}


def nonlinearity_of(nonlinearity: str | Activation) -> Activation:
    """The activation named ``"tanh"`` or ``"relu"`` (PyTorch's ``nn.RNN`` choices), or
    ``nonlinearity`` itself when it is a function."""
    if callable(nonlinearity):
        return nonlinearity
    if nonlinearity not in NONLINEARITIES:
        raise ConfigError(f"ember: Rnn: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
    return NONLINEARITIES[nonlinearity]
