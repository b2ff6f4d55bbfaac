"""Recurrent operators: LSTM, GRU and RNN, every attribute of the spec, onto
``ember.nn.rnn``'s one-direction scans (:mod:`ember.nn.rnn.direction`).

ONNX stores each direction's weights fused (``W`` ``[dirs, G * hidden, input]``, ``R``
``[dirs, G * hidden, hidden]``, ``B`` ``[dirs, 2 * G * hidden]``) with its own gate order
(LSTM ``i, o, f, c``; GRU ``z, r, h``); they are reordered into PyTorch's (LSTM
``i, f, g, o``; GRU ``r, z, n``) and transposed into ember's ``[in, out]`` layout with
tensor ops, so initializers that train get their gradients through the reordering.
``sequence_lens`` is read on the host (it shapes the step masks). Peepholes (``P``)
add ``p_i * c``, ``p_f * c`` and ``p_o * c_new`` to the gates (``ember.nn.rnn``'s
``lstm_direction(peepholes=...)``); ``input_forget`` is refused unless it is 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.nn import functional as F
from ember.nn.rnn.direction import gru_direction, lstm_direction, rnn_direction
from ember.onnx.ops.registry import Node, op
from ember.tensor import Tensor

Activation = Callable[[Tensor], Tensor]

#: ONNX's gate order -> PyTorch's, as block indices of the fused weights.
_LSTM_GATES = (0, 2, 3, 1)  # i, o, f, c -> i, f, c(g), o
_GRU_GATES = (1, 0, 2)  # z, r, h -> r, z, n
_DIRECTIONS = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}
#: name -> (activation builder from alpha and beta, default alpha, default beta);
#: ``None`` marks a parameter the activation does not take (nothing is consumed).
_ACTIVATIONS: dict[str, tuple[Callable[[float, float], Activation], float | None, float | None]] = {
    "relu": (lambda a, b: F.relu, None, None),
    "tanh": (lambda a, b: F.tanh, None, None),
    "sigmoid": (lambda a, b: F.sigmoid, None, None),
    "affine": (lambda a, b: lambda x: x.mul_scalar(a).add_scalar(b), 1.0, 0.0),
    "leakyrelu": (lambda a, b: lambda x: F.leaky_relu(x, a), 0.01, None),
    "thresholdedrelu": (lambda a, b: lambda x: x.mask_fill(x.lower_equal_elem(a), 0.0), 1.0, None),
    "scaledtanh": (lambda a, b: lambda x: x.mul_scalar(b).tanh().mul_scalar(a), 1.0, 1.0),
    "hardsigmoid": (lambda a, b: lambda x: F.hard_sigmoid(x, a, b), 0.2, 0.5),
    "elu": (lambda a, b: lambda x: F.elu(x, a), 1.0, None),
    "softsign": (lambda a, b: lambda x: x.div(x.abs().add_scalar(1.0)), None, None),
    "softplus": (lambda a, b: F.softplus, None, None),
}


def _activations(node: Node, per_direction: int, n_dirs: int, defaults: tuple[str, ...]) -> list[list[Activation]]:
    """Each direction's activations, with ``activation_alpha``/``beta`` consumed in order
    by the activations that take them (as onnxruntime reads them)."""
    names = node.attr("activations")
    alphas = list(node.attr("activation_alpha") or [])
    betas = list(node.attr("activation_beta") or [])
    if names is None:
        names = list(defaults) * n_dirs
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in names]
    if len(names) == per_direction and n_dirs == 2:
        names = names * 2  # one list for both directions
    if len(names) != per_direction * n_dirs:
        raise node.attr_error(
            "activations",
            f"needs {per_direction} activation(s) per direction ({per_direction * n_dirs} for {n_dirs} direction(s))",
        )
    built: list[Activation] = []
    for name in names:
        entry = _ACTIVATIONS.get(name.lower())
        if entry is None:
            raise node.attr_error(
                "activations", f"{name!r} is not an activation of the spec ({', '.join(sorted(_ACTIVATIONS))})"
            )
        make, alpha_default, beta_default = entry
        alpha = (alphas.pop(0) if alphas else alpha_default) if alpha_default is not None else 0.0
        beta = (betas.pop(0) if betas else beta_default) if beta_default is not None else 0.0
        built.append(make(float(alpha), float(beta)))
    return [built[d * per_direction : (d + 1) * per_direction] for d in range(n_dirs)]


def _reorder(w: Tensor, gates: tuple[int, ...], axis: int) -> Tensor:
    """``w`` with its gate blocks along ``axis`` in PyTorch's order."""
    if gates == tuple(range(len(gates))):
        return w
    blocks = w.chunk(len(gates), axis)
    return Tensor.cat([blocks[g] for g in gates], axis)


class _Layer:
    """What the three operators share: attributes, layouts, weights per direction."""

    def __init__(self, node: Node, gates: tuple[int, ...], per_direction: int, defaults: tuple[str, ...]):
        self.node = node
        direction = node.attr("direction", "forward")
        direction = direction.decode() if isinstance(direction, bytes) else direction
        if direction not in _DIRECTIONS:
            raise node.attr_error("direction", "must be 'forward', 'reverse' or 'bidirectional'")
        self.reverse = _DIRECTIONS[direction]
        self.layout = int(node.attr("layout", 0))
        if self.layout not in (0, 1):
            raise node.attr_error("layout", "must be 0 ([seq, batch, ...]) or 1 ([batch, seq, ...])")
        clip = node.attr("clip")
        self.clip = None if clip is None else float(clip)
        if self.clip is not None and not self.clip > 0:
            raise node.attr_error("clip", "must be a positive number")
        self.hidden = node.attr("hidden_size")
        self.gates = gates
        self.activations = _activations(node, per_direction, len(self.reverse), defaults)
        self.n_outputs = len(node.outputs)

    def weights(
        self, d: int, w: Tensor, r: Tensor, b: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        """Direction ``d``'s ``(w_ih, w_hh, b_ih, b_hh)`` in ember's layout and PyTorch's gate order."""
        n_gates = len(self.gates)
        dirs = len(self.reverse)
        if w.rank != 3 or r.rank != 3 or w.dims()[0] != dirs or r.dims()[0] != dirs:
            raise self.node.error(
                f"W {w.dims()} and R {r.dims()} must be [num_directions={dirs}, {n_gates} * hidden_size, ...]"
            )
        hidden = r.dims()[2]
        if self.hidden is not None and int(self.hidden) != hidden:
            raise self.node.attr_error("hidden_size", f"R has hidden size {hidden} (R is {r.dims()})")
        w_ih = _reorder(w.narrow(0, d, 1).squeeze_dim(0), self.gates, 0).permute([1, 0])
        w_hh = _reorder(r.narrow(0, d, 1).squeeze_dim(0), self.gates, 0).permute([1, 0])
        if b is None:
            return w_ih, w_hh, None, None
        if b.dims() != [dirs, 2 * n_gates * hidden]:
            raise self.node.error(f"B must be [{dirs}, {2 * n_gates * hidden}], got {b.dims()}")
        row = b.narrow(0, d, 1).squeeze_dim(0)
        b_ih = _reorder(row.narrow(0, 0, n_gates * hidden), self.gates, 0)
        b_hh = _reorder(row.narrow(0, n_gates * hidden, n_gates * hidden), self.gates, 0)
        return w_ih, w_hh, b_ih, b_hh

    def state(self, s: Tensor | None, d: int) -> Tensor | None:
        """Direction ``d``'s initial state ``[batch, hidden]`` (ONNX's is
        ``[dirs, batch, hidden]``, or ``[batch, dirs, hidden]`` with ``layout=1``)."""
        if s is None:
            return None
        axis = 1 if self.layout else 0
        if s.rank != 3 or s.dims()[axis] != len(self.reverse):
            raise self.node.error(
                f"an initial state must be {'[batch, num_directions, hidden]' if self.layout else '[num_directions, batch, hidden]'}, "
                f"got {s.dims()}"
            )
        return s.narrow(axis, d, 1).squeeze_dim(axis)

    def lengths(self, seq_lens: Any) -> Any:
        if seq_lens is None:
            return None
        return [int(v) for v in np.asarray(seq_lens).reshape(-1)]

    def directions(
        self,
        one: Callable[..., tuple[Tensor, ...]],
        x: Tensor,
        w: Tensor,
        r: Tensor,
        b: Tensor | None,
        seq_lens: Any,
        *states: Tensor | None,
    ) -> tuple[Tensor, ...]:
        """The node's outputs: ``one(d, x, weights, states, **common)`` run for each direction
        ``d`` (``weights`` as :meth:`weights` gives them, ``states`` its initial states,
        ``common`` the keywords every ``ember.nn.rnn`` direction takes), returning
        ``(y, *final states)``, then stacked as ONNX lays them out."""
        common = {"lengths": self.lengths(seq_lens), "batch_first": bool(self.layout), "clip": self.clip}
        ys: list[Tensor] = []
        finals: list[list[Tensor]] = [[] for _ in states]
        for d, reverse in enumerate(self.reverse):
            initial = [self.state(s, d) for s in states]
            y, *ends = one(d, x, self.weights(d, w, r, b), initial, reverse=reverse, **common)
            ys.append(y)
            for kind, end in zip(finals, ends):
                kind.append(end)
        return self.outputs(ys, finals)

    def outputs(self, ys: list[Tensor], finals: list[list[Tensor]]) -> tuple[Tensor, ...]:
        """``Y`` (``[seq, dirs, batch, hidden]``, or ``[batch, seq, dirs, hidden]``) and the
        final states (``[dirs, batch, hidden]``, or ``[batch, dirs, hidden]``)."""
        y = Tensor.stack(ys, 2 if self.layout else 1)
        states = [Tensor.stack(kind, 1 if self.layout else 0) for kind in finals]
        return (y, *states)[: max(self.n_outputs, 1)]


def _peepholes(node: Node, dirs: int) -> Callable[[Tensor | None, int], tuple[Tensor, Tensor, Tensor] | None]:
    """Direction ``d``'s peephole weights ``(p_i, p_f, p_o)`` from ``P`` ``[dirs, 3 * hidden]``
    (ONNX's order ``i, o, f``); ``None`` without ``P`` or for an all-zero constant one."""
    p = node.const(7)
    if not node.has(7) or (p is not None and not np.any(p)):
        return lambda p, d: None

    def of(p: Tensor | None, d: int) -> tuple[Tensor, Tensor, Tensor] | None:
        if p is None:
            return None
        if p.rank != 2 or p.dims()[0] != dirs or p.dims()[1] % 3:
            raise node.error(f"P must be [num_directions={dirs}, 3 * hidden_size], got {p.dims()}")
        p_i, p_o, p_f = p.narrow(0, d, 1).squeeze_dim(0).chunk(3, 0)
        return p_i, p_f, p_o

    return of


@op("LSTM", host=(4,))
def lstm(node: Node) -> Callable[..., Any]:
    layer = _Layer(node, _LSTM_GATES, 3, ("Sigmoid", "Tanh", "Tanh"))
    if int(node.attr("input_forget", 0)):
        raise node.attr_error("input_forget", "coupled input and forget gates are not supported")
    peepholes = _peepholes(node, len(layer.reverse))

    def run(
        x: Tensor,
        w: Tensor,
        r: Tensor,
        b: Tensor | None = None,
        seq_lens: Any = None,
        h0: Tensor | None = None,
        c0: Tensor | None = None,
        p: Tensor | None = None,
    ) -> tuple[Tensor, ...]:
        def one(d: int, x: Tensor, weights: Any, states: list[Any], **common: Any) -> tuple[Tensor, ...]:
            f, g, h = layer.activations[d]
            return lstm_direction(x, *weights, *states, activations=(f, g, h), peepholes=peepholes(p, d), **common)

        return layer.directions(one, x, w, r, b, seq_lens, h0, c0)

    return run


@op("GRU", host=(4,))
def gru(node: Node) -> Callable[..., Any]:
    layer = _Layer(node, _GRU_GATES, 2, ("Sigmoid", "Tanh"))
    reset_after = bool(int(node.attr("linear_before_reset", 0)))

    def run(
        x: Tensor,
        w: Tensor,
        r: Tensor,
        b: Tensor | None = None,
        seq_lens: Any = None,
        h0: Tensor | None = None,
    ) -> tuple[Tensor, ...]:
        def one(d: int, x: Tensor, weights: Any, states: list[Any], **common: Any) -> tuple[Tensor, ...]:
            f, g = layer.activations[d]
            return gru_direction(x, *weights, *states, reset_after=reset_after, activations=(f, g), **common)

        return layer.directions(one, x, w, r, b, seq_lens, h0)

    return run


@op("RNN", host=(4,))
def rnn(node: Node) -> Callable[..., Any]:
    layer = _Layer(node, (0,), 1, ("Tanh",))

    def run(
        x: Tensor,
        w: Tensor,
        r: Tensor,
        b: Tensor | None = None,
        seq_lens: Any = None,
        h0: Tensor | None = None,
    ) -> tuple[Tensor, ...]:
        def one(d: int, x: Tensor, weights: Any, states: list[Any], **common: Any) -> tuple[Tensor, ...]:
            (act,) = layer.activations[d]
            return rnn_direction(x, *weights, *states, nonlinearity=act, **common)

        return layer.directions(one, x, w, r, b, seq_lens, h0)

    return run
