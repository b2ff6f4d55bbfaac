"""``RecurrentStack``: layers of recurrent cells, one or two directions each, run over a
sequence with optional per-sequence lengths; what ``Lstm``, ``Gru`` and ``Rnn`` share."""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.device import Device
from ember.errors import ConfigError
from ember.module import Module
from ember.nn.init import Initializer
from ember.nn.rnn.cells import RecurrentCell, new_gates
from ember.nn.rnn.checks import check_sequence, final_state, initial_states, sequence_mask
from ember.nn.rnn.pytorch_keys import rename_stack_keys
from ember.tensor import Tensor
from ember.tensor.layer_ops import dropout


def check_stack_config(name: str, d_input: int, d_hidden: int, num_layers: int, drop: float) -> None:
    """The checks every recurrent config shares (``ConfigError`` naming the field)."""
    if d_input <= 0 or d_hidden <= 0:
        raise ConfigError(f"ember: {name}: d_input and d_hidden must be > 0, got {d_input}, {d_hidden}")
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise ConfigError(f"ember: {name}: num_layers must be an int >= 1, got {num_layers!r}")
    if isinstance(drop, bool) or not isinstance(drop, (int, float)) or not 0.0 <= drop <= 1.0:
        raise ConfigError(f"ember: {name}: dropout must lie in [0, 1], got {drop!r}")


def make_cells(
    cls: type[RecurrentCell],
    d_input: int,
    d_hidden: int,
    num_layers: int,
    bidirectional: bool,
    bias: bool,
    initializer: Initializer,
    device: Device,
    **constants: Any,
) -> list[RecurrentCell]:
    """The cells of a stack in PyTorch's order (layer 0 forward, layer 0 reverse, layer 1
    ...); layers above the first read ``num_directions * d_hidden`` features."""
    directions = 2 if bidirectional else 1
    cells = []
    for layer in range(num_layers):
        width = d_input if layer == 0 else directions * d_hidden
        for _ in range(directions):
            gates = new_gates(cls.gate_names, width, d_hidden, bias, initializer, device)
            cells.append(cls(**gates, **constants))
    return cells


class RecurrentStack(Module):
    """``num_layers`` layers of cells (``bidirectional``: a forward and a reverse cell per
    layer, their outputs concatenated), ``dropout`` on the outputs of every layer but the
    last while training (on an autodiff device, as :class:`~ember.nn.Dropout`)."""

    cells: list[RecurrentCell]
    num_layers: int = 1
    bidirectional: bool = False
    dropout: float = 0.0
    batch_first: bool = True

    @property
    def d_input(self) -> int:
        return self.cells[0].d_input

    @property
    def d_hidden(self) -> int:
        return self.cells[0].d_hidden

    @property
    def num_directions(self) -> int:
        return 2 if self.bidirectional else 1

    def run(self, name: str, x: Tensor, given: list[tuple[str, Any]], lengths: Any) -> tuple[Tensor, list[Tensor]]:
        """The output sequence and each kind of final state (see the subclasses' ``forward``)."""
        cells, directions = self.cells, self.num_directions
        if len(cells) != self.num_layers * directions:
            raise ConfigError(
                f"ember: {name}: {len(cells)} cells for num_layers={self.num_layers} and "
                f"{directions} direction(s); build the layer with its config"
            )
        x = check_sequence(name, x, self.d_input, self.batch_first)
        tdim = 1 if self.batch_first else 0
        batch, seq = x.dims()[1 - tdim], x.dims()[tdim]
        valid = sequence_mask(name, lengths, batch, seq, x)
        init, two_d = initial_states(name, given, len(cells), batch, self.d_hidden, self.batch_first, x)
        seq_x = x.swap_dims(0, 1) if self.batch_first else x  # time-major: [seq, batch, features]
        training = self.dropout > 0.0 and x.device.is_autodiff()
        finals: list[tuple[Tensor, ...]] = []
        for layer in range(self.num_layers):
            outs = []
            for d in range(directions):
                k = layer * directions + d
                states = tuple(s.squeeze_dim(tdim) for s in init[k])
                o, last = cells[k].sequence(seq_x, states, valid, d == 1)
                outs.append(o)
                finals.append(tuple(s.unsqueeze_dim(tdim) for s in last))
            seq_x = outs[0] if directions == 1 else Tensor.cat(outs, 2)
            if training and layer + 1 < self.num_layers:
                seq_x = dropout(seq_x, self.dropout)
        out = seq_x.swap_dims(0, 1) if self.batch_first else seq_x
        kinds = len(given)
        return out, [final_state([f[i] for f in finals], self.batch_first, two_d) for i in range(kinds)]

    def adapt_pytorch_keys(self, prefix: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        gates = type(self.cells[0]).gate_names
        return rename_stack_keys(prefix, arrays, gates, self.num_layers, self.num_directions, to_ember=True)

    def export_pytorch_keys(self, prefix: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        gates = type(self.cells[0]).gate_names
        return rename_stack_keys(prefix, arrays, gates, self.num_layers, self.num_directions, to_ember=False)

    def extra_repr(self) -> str:
        return (
            f"d_input: {self.d_input}, d_hidden: {self.d_hidden}, num_layers: {self.num_layers}, "
            f"bidirectional: {self.bidirectional}, dropout: {self.dropout}, batch_first: {self.batch_first}, "
            f"bias: {self.cells[0].bias}"
        )
