"""``Rnn``: the Elman recurrent layer (``tanh`` or ``relu``), stacked and bidirectional
as PyTorch's ``nn.RNN``."""

from __future__ import annotations

from typing import Any

from ember.device import Device
from ember.errors import ConfigError
from ember.module import Config
from ember.nn.init import Initializer, XavierNormal
from ember.nn.rnn.cells import RnnCell
from ember.nn.rnn.functional import NONLINEARITIES
from ember.nn.rnn.stack import RecurrentStack, check_stack_config, make_cells
from ember.tensor import Tensor


class RnnConfig(Config):
    """Configuration of :class:`Rnn`: PyTorch's ``nn.RNN`` fields under Burn's names.

    >>> out, h = RnnConfig(4, 8, nonlinearity="relu", num_layers=2).init()(Tensor.ones([2, 5, 4]))
    >>> out.dims(), h.dims()
    ([2, 5, 8], [2, 2, 8])
    """

    d_input: int
    d_hidden: int
    bias: bool = True
    nonlinearity: str = "tanh"
    initializer: Initializer = XavierNormal(gain=1.0)
    batch_first: bool = True
    num_layers: int = 1
    bidirectional: bool = False
    dropout: float = 0.0

    def validate(self) -> None:
        check_stack_config("RnnConfig", self.d_input, self.d_hidden, self.num_layers, self.dropout)
        if self.nonlinearity not in NONLINEARITIES:
            raise ConfigError(f"ember: RnnConfig: nonlinearity must be 'tanh' or 'relu', got {self.nonlinearity!r}")

    def init(self, device: Device | None = None) -> Rnn:
        cells = make_cells(
            RnnCell,
            self.d_input,
            self.d_hidden,
            self.num_layers,
            self.bidirectional,
            self.bias,
            self.initializer,
            device or Device.default(),
            nonlinearity=self.nonlinearity,
        )
        return Rnn(
            cells=cells,
            num_layers=self.num_layers,
            bidirectional=self.bidirectional,
            dropout=self.dropout,
            batch_first=self.batch_first,
        )


class Rnn(RecurrentStack):
    """A stack of Elman RNN layers (PyTorch's ``nn.RNN``): per step and cell
    ``h = act(x W + b_ih + h U + b_hh)``. ``load_pytorch`` reads ``nn.RNN``'s state dict."""

    @property
    def nonlinearity(self) -> str:
        return str(getattr(self.cells[0], "nonlinearity", "tanh"))

    def forward(self, x: Tensor, state: Tensor | None = None, lengths: Any = None) -> tuple[Tensor, Tensor]:
        """``x`` ``[batch, seq, d_input]`` (``[seq, batch, d_input]`` unless ``batch_first``)
        to ``(output, h_n)`` as :meth:`Gru.forward <ember.nn.Gru.forward>`."""
        out, (h,) = self.run("Rnn", x, [("h0", state)], lengths)
        return out, h

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, nonlinearity: {self.nonlinearity}"
