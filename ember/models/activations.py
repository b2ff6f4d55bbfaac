"""The activation functions Hugging Face configs name (``hidden_act``,
``activation_function``), as ember's functional activations."""

from __future__ import annotations

from collections.abc import Callable

from ember.errors import ConfigError
from ember.tensor import Tensor
from ember.tensor import activation as F

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": F.gelu,
    "gelu_new": F.gelu_tanh,
    "gelu_pytorch_tanh": F.gelu_tanh,
    "gelu_fast": F.gelu_tanh,
    "quick_gelu": F.quick_gelu,
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
    "tanh": F.tanh,
    "sigmoid": F.sigmoid,
}


def check_activation(owner: str, name: str) -> None:
    """A ConfigError naming the supported activations when ``name`` is not one."""
    if name not in ACTIVATIONS:
        raise ConfigError(f"ember: {owner}: unknown activation {name!r}; ember knows {', '.join(sorted(ACTIVATIONS))}")


def activation(name: str, x: Tensor) -> Tensor:
    """``x`` through the activation a config names."""
    return ACTIVATIONS[name](x)
