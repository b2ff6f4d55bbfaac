"""``Lstm``: long short-term memory (Hochreiter & Schmidhuber, 1997)."""

from __future__ import annotations

from dataclasses import dataclass

from ember.device import Device
from ember.errors import ConfigError
from ember.module import Config, Module
from ember.nn.init import Initializer, XavierNormal
from ember.nn.rnn.gate_controller import GateController, check_sequence, check_state, stacked
from ember.tensor import Tensor
from ember.tensor import activation as F


@dataclass(frozen=True)
class LstmState:
    """The cell and hidden states, each ``[batch, d_hidden]``."""

    cell: Tensor
    hidden: Tensor


class LstmConfig(Config):
    """Configuration of :class:`Lstm` (Burn's fields; Xavier-normal weights).

    >>> out, state = LstmConfig(4, 8).init()(Tensor.ones([2, 5, 4]))
    >>> out.dims(), state.hidden.dims()
    ([2, 5, 8], [2, 8])
    """

    d_input: int
    d_hidden: int
    bias: bool = True
    initializer: Initializer = XavierNormal(gain=1.0)
    batch_first: bool = True

    def validate(self) -> None:
        if self.d_input <= 0 or self.d_hidden <= 0:
            raise ConfigError(
                f"ember: LstmConfig: d_input and d_hidden must be > 0, got {self.d_input}, {self.d_hidden}"
            )

    def init(self, device: Device | None = None) -> Lstm:
        device = device or Device.default()

        def gate() -> GateController:
            return GateController.new(self.d_input, self.d_hidden, self.bias, self.initializer, device)

        return Lstm(
            input_gate=gate(), forget_gate=gate(), output_gate=gate(), cell_gate=gate(), batch_first=self.batch_first
        )


class Lstm(Module):
    """An LSTM layer. Per step, with ``[x, h] -> gate`` maps from the gate controllers:
    ``i, f, o = sigmoid(...)``, ``g = tanh(...)``, ``c = f * c + i * g``,
    ``h = o * tanh(c)`` (PyTorch's equations)."""

    input_gate: GateController
    forget_gate: GateController
    output_gate: GateController
    cell_gate: GateController
    batch_first: bool = True

    @property
    def d_hidden(self) -> int:
        return self.input_gate.input_transform.d_output

    @property
    def d_input(self) -> int:
        return self.input_gate.input_transform.d_input

    def forward(self, x: Tensor, state: LstmState | None = None) -> tuple[Tensor, LstmState]:
        """``x`` ``[batch, seq, d_input]`` (``[seq, batch, d_input]`` unless batch_first) to
        the hidden states of every step (same layout, ``d_hidden``) and the last state."""
        x = check_sequence("Lstm", x, self.d_input, self.batch_first)
        batch, seq, _ = x.dims()
        h_size = self.d_hidden
        gates = [self.input_gate, self.forget_gate, self.cell_gate, self.output_gate]
        w_x, b_x = stacked(gates, "input_transform")
        w_h, b_h = stacked(gates, "hidden_transform")
        projected = x.matmul(w_x)  # all steps at once: [batch, seq, 4 * d_hidden]
        if b_x is not None:
            projected = projected.add(b_x.add(b_h) if b_h is not None else b_x)
        if state is None:
            cell = hidden = Tensor.zeros([batch, h_size], device=x.device, dtype=x.dtype)
        else:
            cell, hidden = check_state(state.cell, batch, h_size), check_state(state.hidden, batch, h_size)
        outputs = []
        for t in range(seq):
            z = projected.narrow(1, t, 1).squeeze_dim(1).add(hidden.matmul(w_h))
            i, f, g, o = z.chunk(4, 1)
            cell = F.sigmoid(f).mul(cell).add(F.sigmoid(i).mul(g.tanh()))
            hidden = F.sigmoid(o).mul(cell.tanh())
            outputs.append(hidden)
        out = Tensor.stack(outputs, 1)
        return (out if self.batch_first else out.swap_dims(0, 1)), LstmState(cell=cell, hidden=hidden)

    def extra_repr(self) -> str:
        return f"d_input: {self.d_input}, d_hidden: {self.d_hidden}, bias: {self.input_gate.input_transform.bias is not None}"
