"""The cells of the recurrent layers: one direction of one layer, a ``GateController``
per gate (Burn's layout), read as fused weights by the loops of
:mod:`ember.nn.rnn.functional`. Called on one step they are PyTorch's ``nn.LSTMCell``,
``nn.GRUCell`` and ``nn.RNNCell``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ember.device import Device
from ember.errors import ShapeError
from ember.module import Module
from ember.nn.init import Initializer
from ember.nn.rnn.functional import gru_layer, gru_scan, lstm_layer, lstm_scan, rnn_scan
from ember.nn.rnn.gate_controller import GateController, stacked
from ember.nn.rnn.pytorch_keys import join_cell_keys, split_cell_keys
from ember.tensor import Tensor


@dataclass(frozen=True)
class LstmState:
    """An LSTM's cell and hidden states: ``[num_layers * num_directions, batch, d_hidden]``
    from :class:`~ember.nn.Lstm` (``[batch, d_hidden]`` from a cell, or where a 2-D state
    was given). It unpacks in PyTorch's order: ``h, c = state``."""

    cell: Tensor
    hidden: Tensor

    def __iter__(self) -> Iterator[Tensor]:
        return iter((self.hidden, self.cell))


def _check_step(name: str, x: Any, d_input: int) -> Tensor:
    if not isinstance(x, Tensor) or x.rank != 2 or x.dims()[1] != d_input:
        shape = x.dims() if isinstance(x, Tensor) else type(x).__name__
        raise ShapeError(f"ember: {name}: one step's input must be [batch, d_input={d_input}], got {shape}")
    return x.float()


def _check_step_state(name: str, t: Any, batch: int, size: int) -> Tensor:
    if not isinstance(t, Tensor) or t.dims() != [batch, size]:
        shape = t.dims() if isinstance(t, Tensor) else type(t).__name__
        raise ShapeError(f"ember: {name}: the state must be [batch={batch}, d_hidden={size}], got {shape}")
    return t.float()


class RecurrentCell(Module):
    """What every cell shares: its gates (in PyTorch's order, ``gate_names``) and their
    weights fused as ``(w_ih [d_input, G * d_hidden], w_hh, b_ih, b_hh)``."""

    gate_names: ClassVar[tuple[str, ...]] = ()
    n_states: ClassVar[int] = 1

    def gates(self) -> list[GateController]:
        return [getattr(self, name) for name in self.gate_names]

    @property
    def d_input(self) -> int:
        return self.gates()[0].input_transform.d_input

    @property
    def d_hidden(self) -> int:
        return self.gates()[0].input_transform.d_output

    @property
    def bias(self) -> bool:
        return self.gates()[0].input_transform.bias is not None

    def weights(self) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        w_ih, b_ih = stacked(self.gates(), "input_transform")
        w_hh, b_hh = stacked(self.gates(), "hidden_transform")
        return w_ih, w_hh, b_ih, b_hh

    def scan(
        self, xs: list[Tensor], states: tuple[Tensor, ...], valid: list[Tensor] | None, reverse: bool
    ) -> tuple[list[Tensor], tuple[Tensor, ...]]:
        """The outputs of every step of ``xs`` and the last states (see
        :mod:`ember.nn.rnn.functional`)."""
        raise NotImplementedError

    def sequence(
        self, x: Tensor, states: tuple[Tensor, ...], valid: Tensor | None, reverse: bool
    ) -> tuple[Tensor, tuple[Tensor, ...]]:
        """The outputs ``[seq, batch, d_hidden]`` over the time-major ``x`` ``[seq, batch,
        d_input]`` and the last states (each ``[batch, d_hidden]``); ``valid`` a bool
        ``[seq, batch, 1]`` mask or ``None``. By default :meth:`scan` over the steps; the
        LSTM and GRU run the whole sequence as one fused call."""
        seq, batch = x.dims()[0], x.dims()[1]
        xs = [x.narrow(0, t, 1).squeeze_dim(0) for t in range(seq)]
        masks = None if valid is None else [valid.narrow(0, t, 1).reshape([batch, 1]) for t in range(seq)]
        outs, last = self.scan(xs, states, masks, reverse)
        return Tensor.stack(outs, 0), last

    def adapt_pytorch_keys(self, prefix: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """PyTorch's ``weight_ih`` etc. (gates stacked in PyTorch's order) split into the gates."""
        return split_cell_keys(prefix, arrays, self.gate_names)

    def export_pytorch_keys(self, prefix: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return join_cell_keys(prefix, arrays, self.gate_names)

    def extra_repr(self) -> str:
        return f"d_input: {self.d_input}, d_hidden: {self.d_hidden}, bias: {self.bias}"


def new_gates(
    names: tuple[str, ...], d_input: int, d_hidden: int, bias: bool, initializer: Initializer, device: Device
) -> dict[str, GateController]:
    return {name: GateController.new(d_input, d_hidden, bias, initializer, device) for name in names}


class LstmCell(RecurrentCell):
    """One LSTM direction of one layer (PyTorch's ``nn.LSTMCell`` on one step):
    ``i, f, o = sigmoid(...)``, ``g = tanh(...)``, ``c = f * c + i * g``, ``h = o * tanh(c)``."""

    input_gate: GateController
    forget_gate: GateController
    cell_gate: GateController
    output_gate: GateController
    gate_names: ClassVar[tuple[str, ...]] = ("input_gate", "forget_gate", "cell_gate", "output_gate")
    n_states: ClassVar[int] = 2

    def forward(self, x: Tensor, state: LstmState | tuple[Tensor, Tensor] | None = None) -> LstmState:
        """One step: ``x`` ``[batch, d_input]`` and ``state`` (``LstmState`` or PyTorch's
        ``(h, c)``, each ``[batch, d_hidden]``; zeros when omitted) to the next state."""
        x = _check_step("LstmCell", x, self.d_input)
        batch, size = x.dims()[0], self.d_hidden
        if state is None:
            h = c = Tensor.zeros([batch, size], device=x.device)
        else:
            h, c = state
            h, c = _check_step_state("LstmCell", h, batch, size), _check_step_state("LstmCell", c, batch, size)
        _, (h, c) = self.scan([x], (h, c), None, False)
        return LstmState(cell=c, hidden=h)

    def scan(
        self, xs: list[Tensor], states: tuple[Tensor, ...], valid: list[Tensor] | None, reverse: bool
    ) -> tuple[list[Tensor], tuple[Tensor, ...]]:
        outs, h, c = lstm_scan(xs, *self.weights(), states[0], states[1], valid=valid, reverse=reverse)
        return outs, (h, c)

    def sequence(
        self, x: Tensor, states: tuple[Tensor, ...], valid: Tensor | None, reverse: bool
    ) -> tuple[Tensor, tuple[Tensor, ...]]:
        y, h, c = lstm_layer(x, *self.weights(), states[0], states[1], valid=valid, reverse=reverse)
        return y, (h, c)


class GruCell(RecurrentCell):
    """One GRU direction of one layer (PyTorch's ``nn.GRUCell`` on one step, with
    ``reset_after``; see :func:`~ember.nn.rnn.functional.gru_scan`)."""

    reset_gate: GateController
    update_gate: GateController
    new_gate: GateController
    reset_after: bool = True
    gate_names: ClassVar[tuple[str, ...]] = ("reset_gate", "update_gate", "new_gate")

    def forward(self, x: Tensor, state: Tensor | None = None) -> Tensor:
        """One step: ``x`` ``[batch, d_input]`` and ``state`` ``[batch, d_hidden]`` (zeros
        when omitted) to the next hidden state."""
        x = _check_step("GruCell", x, self.d_input)
        batch, size = x.dims()[0], self.d_hidden
        h = Tensor.zeros([batch, size], device=x.device) if state is None else state
        h = _check_step_state("GruCell", h, batch, size)
        return self.scan([x], (h,), None, False)[1][0]

    def scan(
        self, xs: list[Tensor], states: tuple[Tensor, ...], valid: list[Tensor] | None, reverse: bool
    ) -> tuple[list[Tensor], tuple[Tensor, ...]]:
        outs, h = gru_scan(xs, *self.weights(), states[0], valid=valid, reverse=reverse, reset_after=self.reset_after)
        return outs, (h,)

    def sequence(
        self, x: Tensor, states: tuple[Tensor, ...], valid: Tensor | None, reverse: bool
    ) -> tuple[Tensor, tuple[Tensor, ...]]:
        if not self.reset_after:
            return super().sequence(x, states, valid, reverse)
        y, h = gru_layer(x, *self.weights(), states[0], valid=valid, reverse=reverse)
        return y, (h,)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, reset_after: {self.reset_after}"


class RnnCell(RecurrentCell):
    """One Elman RNN direction of one layer (PyTorch's ``nn.RNNCell`` on one step):
    ``h = act(x W + b + h U + c)`` with ``nonlinearity`` ``"tanh"`` or ``"relu"``."""

    gate: GateController
    nonlinearity: str = "tanh"
    gate_names: ClassVar[tuple[str, ...]] = ("gate",)

    def forward(self, x: Tensor, state: Tensor | None = None) -> Tensor:
        """One step: ``x`` ``[batch, d_input]`` and ``state`` ``[batch, d_hidden]`` (zeros
        when omitted) to the next hidden state."""
        x = _check_step("RnnCell", x, self.d_input)
        batch, size = x.dims()[0], self.d_hidden
        h = Tensor.zeros([batch, size], device=x.device) if state is None else state
        h = _check_step_state("RnnCell", h, batch, size)
        return self.scan([x], (h,), None, False)[1][0]

    def scan(
        self, xs: list[Tensor], states: tuple[Tensor, ...], valid: list[Tensor] | None, reverse: bool
    ) -> tuple[list[Tensor], tuple[Tensor, ...]]:
        outs, h = rnn_scan(xs, *self.weights(), states[0], valid=valid, reverse=reverse, nonlinearity=self.nonlinearity)
        return outs, (h,)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, nonlinearity: {self.nonlinearity}"
