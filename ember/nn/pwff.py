"""``PositionWiseFeedForward``: the transformer's two-layer MLP."""

from __future__ import annotations

import math

from ember.device import Device
from ember.errors import ConfigError
from ember.module import Config, Module
from ember.nn.activation import Gelu, Relu, Sigmoid, SiLU, Tanh
from ember.nn.dropout import Dropout
from ember.nn.init import Initializer, KaimingUniform
from ember.nn.linear import Linear, LinearConfig
from ember.tensor import Tensor

#: Activation names accepted by the transformer configs.
ACTIVATIONS = {
    "gelu": Gelu,
    "gelu_tanh": lambda: Gelu(approximate="tanh"),
    "relu": Relu,
    "silu": SiLU,
    "sigmoid": Sigmoid,
    "tanh": Tanh,
}


def activation_module(name: str, config: str) -> Module:
    """The activation module called ``name`` (a key of :data:`ACTIVATIONS`)."""
    if name not in ACTIVATIONS:
        raise ConfigError(f"ember: {config}: activation must be one of {sorted(ACTIVATIONS)}, got {name!r}")
    return ACTIVATIONS[name]()


class PositionWiseFeedForwardConfig(Config):
    """Configuration of :class:`PositionWiseFeedForward` (Burn's defaults: GELU, dropout 0.1).

    >>> PositionWiseFeedForwardConfig(8, 32).init()(Tensor.ones([2, 3, 8])).dims()
    [2, 3, 8]
    """

    d_model: int
    d_ff: int
    dropout: float = 0.1
    initializer: Initializer = KaimingUniform(gain=1.0 / math.sqrt(3.0), fan_out_only=False)
    activation: str = "gelu"

    def validate(self) -> None:
        if self.d_model <= 0 or self.d_ff <= 0:
            raise ConfigError(
                f"ember: PositionWiseFeedForwardConfig: d_model and d_ff must be > 0, got {self.d_model}, {self.d_ff}"
            )
        if not 0.0 <= self.dropout <= 1.0:
            raise ConfigError(f"ember: PositionWiseFeedForwardConfig: dropout must lie in [0, 1], got {self.dropout}")
        activation_module(self.activation, "PositionWiseFeedForwardConfig")

    def init(self, device: Device | None = None) -> PositionWiseFeedForward:
        device = device or Device.default()
        return PositionWiseFeedForward(
            linear_inner=LinearConfig(self.d_model, self.d_ff, initializer=self.initializer).init(device),
            linear_outer=LinearConfig(self.d_ff, self.d_model, initializer=self.initializer).init(device),
            dropout=Dropout(self.dropout),
            activation=activation_module(self.activation, "PositionWiseFeedForwardConfig"),
        )


class PositionWiseFeedForward(Module):
    """``linear_outer(dropout(activation(linear_inner(x))))`` on the last dim."""

    linear_inner: Linear
    linear_outer: Linear
    dropout: Dropout
    activation: Module

    def forward(self, x: Tensor) -> Tensor:
        return self.linear_outer(self.dropout(self.activation(self.linear_inner(x))))
