"""``GateController``: the pair of linear maps behind one RNN gate."""

from __future__ import annotations

from ember.device import Device
from ember.errors import ShapeError
from ember.module import Module
from ember.nn.init import Initializer
from ember.nn.linear import Linear, LinearConfig
from ember.tensor import Tensor


class GateController(Module):
    """``input_transform(x) + hidden_transform(h)``: ``[d_input, d_output]`` and
    ``[d_output, d_output]`` Linear layers (Burn's layout)."""

    input_transform: Linear
    hidden_transform: Linear

    @staticmethod
    def new(
        d_input: int, d_output: int, bias: bool, initializer: Initializer, device: Device | None = None
    ) -> GateController:
        return GateController(
            input_transform=LinearConfig(d_input, d_output, bias=bias, initializer=initializer).init(device),
            hidden_transform=LinearConfig(d_output, d_output, bias=bias, initializer=initializer).init(device),
        )

    def gate_product(self, x: Tensor, hidden: Tensor) -> Tensor:
        return self.input_transform(x).add(self.hidden_transform(hidden))


def stacked(gates: list[GateController], which: str) -> tuple[Tensor, Tensor | None]:
    """The weights of ``which`` transform of several gates side by side ``[d_in, n * d_out]``,
    and their biases (``None`` without bias), so that one matmul serves all gates."""
    layers = [getattr(g, which) for g in gates]
    weight = Tensor.cat([layer.weight.val() for layer in layers], 1)
    if any(layer.bias is None for layer in layers):
        return weight, None
    return weight, Tensor.cat([layer.bias.val() for layer in layers], 0)


def check_sequence(name: str, x: Tensor, d_input: int, batch_first: bool) -> Tensor:
    """``x`` as ``[batch, seq, d_input]`` (transposed when not ``batch_first``)."""
    layout = "[batch, seq, d_input]" if batch_first else "[seq, batch, d_input]"
    if not isinstance(x, Tensor) or x.rank != 3 or x.dims()[2] != d_input:
        shape = x.dims() if isinstance(x, Tensor) else type(x).__name__
        raise ShapeError(f"ember: {name}: the input must be {layout} with d_input={d_input}, got {shape}")
    x = x.float()
    return x if batch_first else x.swap_dims(0, 1)


def check_state(t: Tensor, batch: int, size: int) -> Tensor:
    """A recurrent state, checked to be ``[batch, size]``."""
    if not isinstance(t, Tensor) or t.dims() != [batch, size]:
        shape = t.dims() if isinstance(t, Tensor) else type(t).__name__
        raise ShapeError(f"ember: the recurrent state must be [batch={batch}, d_hidden={size}], got {shape}")
    return t.float()
