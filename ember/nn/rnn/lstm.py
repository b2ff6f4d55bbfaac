"""``Lstm``: long short-term memory (Hochreiter & Schmidhuber, 1997), stacked and
bidirectional as PyTorch's ``nn.LSTM``; ``BiLstm`` as Burn's."""

from __future__ import annotations

from typing import Any

from ember.device import Device
from ember.module import Config
from ember.nn.init import Initializer, XavierNormal
from ember.nn.rnn.cells import LstmCell, LstmState
from ember.nn.rnn.stack import RecurrentStack, check_stack_config, make_cells
from ember.tensor import Tensor


class LstmConfig(Config):
    """Configuration of :class:`Lstm` (Burn's fields, Xavier-normal weights; PyTorch's
    ``num_layers``, ``bidirectional`` and ``dropout`` between layers while training).

    >>> out, state = LstmConfig(4, 8).init()(Tensor.ones([2, 5, 4]))
    >>> out.dims(), state.hidden.dims()
    ([2, 5, 8], [1, 2, 8])
    >>> lstm = LstmConfig(4, 8, num_layers=2, bidirectional=True).init()
    >>> out, (h, c) = lstm(Tensor.ones([2, 5, 4]), lengths=[5, 3])
    >>> out.dims(), h.dims()
    ([2, 5, 16], [4, 2, 8])
    """

    d_input: int
    d_hidden: int
    bias: bool = True
    initializer: Initializer = XavierNormal(gain=1.0)
    batch_first: bool = True
    num_layers: int = 1
    bidirectional: bool = False
    dropout: float = 0.0

    def validate(self) -> None:
        check_stack_config("LstmConfig", self.d_input, self.d_hidden, self.num_layers, self.dropout)

    def init(self, device: Device | None = None) -> Lstm:
        cells = make_cells(
            LstmCell,
            self.d_input,
            self.d_hidden,
            self.num_layers,
            self.bidirectional,
            self.bias,
            self.initializer,
            device or Device.default(),
        )
        cls = BiLstm if isinstance(self, BiLstmConfig) else Lstm
        return cls(
            cells=cells,
            num_layers=self.num_layers,
            bidirectional=self.bidirectional,
            dropout=self.dropout,
            batch_first=self.batch_first,
        )


class Lstm(RecurrentStack):
    """A stack of LSTM layers (PyTorch's ``nn.LSTM``): per step and cell ``i, f, o =
    sigmoid(...)``, ``g = tanh(...)``, ``c = f * c + i * g``, ``h = o * tanh(c)``
    (:class:`~ember.nn.rnn.LstmCell`). ``load_pytorch`` reads ``nn.LSTM``'s state dict."""

    def forward(
        self, x: Tensor, state: LstmState | tuple[Tensor, Tensor] | None = None, lengths: Any = None
    ) -> tuple[Tensor, LstmState]:
        """``x`` ``[batch, seq, d_input]`` (``[seq, batch, d_input]`` unless ``batch_first``)
        to ``(output, final state)``: the last layer's hidden state at every step (same
        layout, ``num_directions * d_hidden`` features) and an :class:`LstmState` of
        ``[num_layers * num_directions, batch, d_hidden]`` tensors (``h, c = state``).

        ``state`` (an ``LstmState`` or PyTorch's ``(h0, c0)``) starts every cell (zeros when
        omitted); for one layer and direction it may be ``[batch, d_hidden]`` (Burn's), and
        the final state then comes back so. ``lengths`` (one int per batch element, in
        ``[1, seq]``) marks each sequence's real steps: padded steps leave the state alone
        and output zeros, the final state is the one at the last real step, and the reverse
        direction reads each sequence backwards from its own end (as PyTorch's packed
        sequences)."""
        h0 = c0 = None
        if state is not None:
            h0, c0 = state
        out, (h, c) = self.run(type(self).__name__, x, [("h0", h0), ("c0", c0)], lengths)
        return out, LstmState(cell=c, hidden=h)


class BiLstmConfig(LstmConfig):
    """Configuration of :class:`BiLstm` (Burn's): one bidirectional layer.

    >>> out, state = BiLstmConfig(4, 8).init()(Tensor.ones([2, 5, 4]))
    >>> out.dims(), state.cell.dims()
    ([2, 5, 16], [2, 2, 8])
    """

    bidirectional: bool = True


class BiLstm(Lstm):
    """A bidirectional LSTM (Burn's ``BiLstm``): an :class:`Lstm` with
    ``bidirectional=True``, the forward and reverse outputs concatenated and the states
    ``[2 * num_layers, batch, d_hidden]``."""
