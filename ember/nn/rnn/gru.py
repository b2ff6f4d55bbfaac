"""``Gru``: gated recurrent unit (Cho et al., 2014), stacked and bidirectional as
PyTorch's ``nn.GRU``."""

from __future__ import annotations

from typing import Any

from ember.device import Device
from ember.module import Config
from ember.nn.init import Initializer, XavierNormal
from ember.nn.rnn.cells import GruCell
from ember.nn.rnn.stack import RecurrentStack, check_stack_config, make_cells
from ember.tensor import Tensor


class GruConfig(Config):
    """Configuration of :class:`Gru` (Burn's fields; ``reset_after`` applies the reset
    gate after the hidden product, as PyTorch and cuDNN do; PyTorch's ``num_layers``,
    ``bidirectional`` and ``dropout``).

    >>> out, h = GruConfig(4, 8).init()(Tensor.ones([2, 5, 4]))
    >>> out.dims(), h.dims()
    ([2, 5, 8], [1, 2, 8])
    """

    d_input: int
    d_hidden: int
    bias: bool = True
    reset_after: bool = True
    initializer: Initializer = XavierNormal(gain=1.0)
    batch_first: bool = True
    num_layers: int = 1
    bidirectional: bool = False
    dropout: float = 0.0

    def validate(self) -> None:
        check_stack_config("GruConfig", self.d_input, self.d_hidden, self.num_layers, self.dropout)

    def init(self, device: Device | None = None) -> Gru:
        cells = make_cells(
            GruCell,
            self.d_input,
            self.d_hidden,
            self.num_layers,
            self.bidirectional,
            self.bias,
            self.initializer,
            device or Device.default(),
            reset_after=self.reset_after,
        )
        return Gru(
            cells=cells,
            num_layers=self.num_layers,
            bidirectional=self.bidirectional,
            dropout=self.dropout,
            batch_first=self.batch_first,
        )


class Gru(RecurrentStack):
    """A stack of GRU layers (PyTorch's ``nn.GRU``): per step and cell ``r, z = sigmoid(...)``,
    ``n = tanh(x W_n + b_in + r * (h U_n + b_hn))`` (with ``reset_after``, PyTorch's form;
    else ``tanh(x W_n + b_in + (r * h) U_n + b_hn)``), ``h = (1 - z) * n + z * h``.
    ``load_pytorch`` reads ``nn.GRU``'s state dict."""

    @property
    def reset_after(self) -> bool:
        return bool(getattr(self.cells[0], "reset_after", True))

    def forward(self, x: Tensor, state: Tensor | None = None, lengths: Any = None) -> tuple[Tensor, Tensor]:
        """``x`` ``[batch, seq, d_input]`` (``[seq, batch, d_input]`` unless ``batch_first``)
        to ``(output, h_n)``: the last layer's hidden state at every step and the final
        hidden states ``[num_layers * num_directions, batch, d_hidden]``. ``state`` (same
        shape; ``[batch, d_hidden]`` for one layer and direction) starts the cells (zeros
        when omitted); ``lengths`` as in :meth:`Lstm.forward <ember.nn.Lstm.forward>`."""
        out, (h,) = self.run("Gru", x, [("h0", state)], lengths)
        return out, h

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, reset_after: {self.reset_after}"
