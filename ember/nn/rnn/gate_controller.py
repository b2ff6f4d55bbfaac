"""``GateController``: the pair of linear maps behind one RNN gate."""

from __future__ import annotations

from ember.device import Device
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
