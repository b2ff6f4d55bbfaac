"""``ember.nn``: layers, activations, losses and initializers."""

from ember.nn.activation import (
    Celu,
    Elu,
    Gelu,
    Glu,
    HardSigmoid,
    HardSwish,
    LeakyRelu,
    LeakyReluConfig,
    Mish,
    PRelu,
    PReluConfig,
    Relu,
    Selu,
    Sigmoid,
    SiLU,
    Softplus,
    SwiGlu,
    SwiGluConfig,
    Tanh,
)
from ember.nn.init import (
    Constant,
    Initializer,
    KaimingNormal,
    KaimingUniform,
    Normal,
    Ones,
    Orthogonal,
    Uniform,
    XavierNormal,
    XavierUniform,
    Zeros,
)
from ember.nn.linear import Linear, LinearConfig

__all__ = [
    "Celu", "Constant", "Elu", "Gelu", "Glu", "HardSigmoid", "HardSwish", "Initializer",
    "KaimingNormal", "KaimingUniform", "LeakyRelu", "LeakyReluConfig", "Linear", "LinearConfig",
    "Mish", "Normal", "Ones", "Orthogonal", "PRelu", "PReluConfig", "Relu", "Selu", "SiLU",
    "Sigmoid", "Softplus", "SwiGlu", "SwiGluConfig", "Tanh", "Uniform", "XavierNormal",
    "XavierUniform", "Zeros",
]
