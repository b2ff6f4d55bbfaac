"""``Gru``: gated recurrent unit (Cho et al., 2014)."""

from __future__ import annotations

from ember.device import Device
from ember.errors import ConfigError
from ember.module import Config, Module
from ember.nn.init import Initializer, XavierNormal
from ember.nn.rnn.gate_controller import GateController, check_sequence, check_state, stacked
from ember.tensor import Tensor
from ember.tensor import activation as F


class GruConfig(Config):
    """Configuration of :class:`Gru` (Burn's fields; ``reset_after`` applies the reset
    gate after the hidden product, as PyTorch and cuDNN do).

    >>> GruConfig(4, 8).init()(Tensor.ones([2, 5, 4])).dims()
    [2, 5, 8]
    """

    d_input: int
    d_hidden: int
    bias: bool = True
    reset_after: bool = True
    initializer: Initializer = XavierNormal(gain=1.0)
    batch_first: bool = True

    def validate(self) -> None:
        if self.d_input <= 0 or self.d_hidden <= 0:
            raise ConfigError(
                f"ember: GruConfig: d_input and d_hidden must be > 0, got {self.d_input}, {self.d_hidden}"
            )

    def init(self, device: Device | None = None) -> Gru:
        device = device or Device.default()

        def gate() -> GateController:
            return GateController.new(self.d_input, self.d_hidden, self.bias, self.initializer, device)

        return Gru(
            update_gate=gate(),
            reset_gate=gate(),
            new_gate=gate(),
            reset_after=self.reset_after,
            batch_first=self.batch_first,
        )


class Gru(Module):
    """A GRU layer: ``z, r = sigmoid(...)``, ``n = tanh(x W_n + b_n + r * (h U_n + c_n))``
    (with ``reset_after``; else ``tanh(x W_n + b_n + (r * h) U_n + c_n)``),
    ``h = (1 - z) * n + z * h``."""

    update_gate: GateController
    reset_gate: GateController
    new_gate: GateController
    reset_after: bool = True
    batch_first: bool = True

    @property
    def d_hidden(self) -> int:
        return self.update_gate.input_transform.d_output

    @property
    def d_input(self) -> int:
        return self.update_gate.input_transform.d_input

    def forward(self, x: Tensor, state: Tensor | None = None) -> Tensor:
        """``x`` ``[batch, seq, d_input]`` (``[seq, batch, d_input]`` unless batch_first) to
        the hidden state of every step; ``state`` ``[batch, d_hidden]`` starts it (zeros)."""
        x = check_sequence("Gru", x, self.d_input, self.batch_first)
        batch, seq, _ = x.dims()
        size = self.d_hidden
        w_x, b_x = stacked([self.update_gate, self.reset_gate, self.new_gate], "input_transform")
        w_zr, b_zr = stacked([self.update_gate, self.reset_gate], "hidden_transform")
        w_n, b_n = stacked([self.new_gate], "hidden_transform")
        projected = x.matmul(w_x)  # all steps at once: [batch, seq, 3 * d_hidden]
        if b_x is not None:
            projected = projected.add(b_x)
        if state is None:
            hidden = Tensor.zeros([batch, size], device=x.device, dtype=x.dtype)
        else:
            hidden = check_state(state, batch, size)
        outputs = []
        for t in range(seq):
            step = projected.narrow(1, t, 1).squeeze_dim(1)
            xz, xr, xn = step.chunk(3, 1)
            hzr = hidden.matmul(w_zr)
            if b_zr is not None:
                hzr = hzr.add(b_zr)
            hz, hr = hzr.chunk(2, 1)
            z, r = F.sigmoid(xz.add(hz)), F.sigmoid(xr.add(hr))
            if self.reset_after:
                hn = hidden.matmul(w_n)
                hn = hn if b_n is None else hn.add(b_n)
                n = xn.add(r.mul(hn)).tanh()
            else:
                hn = r.mul(hidden).matmul(w_n)
                n = xn.add(hn if b_n is None else hn.add(b_n)).tanh()
            hidden = n.add(z.mul(hidden.sub(n)))  # (1 - z) * n + z * h
            outputs.append(hidden)
        out = Tensor.stack(outputs, 1)
        return out if self.batch_first else out.swap_dims(0, 1)

    def extra_repr(self) -> str:
        return (
            f"d_input: {self.d_input}, d_hidden: {self.d_hidden}, "
            f"bias: {self.update_gate.input_transform.bias is not None}, reset_after: {self.reset_after}"
        )
