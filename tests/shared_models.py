"""Models shared by the tests: one definition each, imported where a test needs them."""

from __future__ import annotations

from ember import Device, Module, Tensor
from ember.nn import Linear, LinearConfig, Relu


class Mlp(Module):
    """docs/design.md's first program's model: ``l2(relu(l1(x)))``, 4-16-1 by default."""

    l1: Linear
    act: Relu
    l2: Linear

    @classmethod
    def new(cls, device: Device, d_input: int = 4, d_hidden: int = 16, d_output: int = 1) -> Mlp:
        return cls(
            l1=LinearConfig(d_input, d_hidden).init(device),
            act=Relu(),
            l2=LinearConfig(d_hidden, d_output).init(device),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.l2(self.act(self.l1(x)))
