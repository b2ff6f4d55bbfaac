"""``Linear``: ``y = x @ weight + bias``, weight of shape ``[d_input, d_output]``."""

from __future__ import annotations

import math

import numpy as np

from ember.device import Device
from ember.errors import ConfigError
from ember.module import Config, Module, Param
from ember.nn.init import Initializer, KaimingUniform
from ember.nn.quantized.linear import QuantizedLinear
from ember.tensor import Tensor
from ember.tensor.layer_ops import linear
from ember.tensor.quant import QuantScheme


class LinearConfig(Config):
    """Configuration of :class:`Linear`. The default initializer matches PyTorch's
    (uniform on ``±1/sqrt(d_input)``), for the weight and the bias.

    >>> LinearConfig(4, 16).init().weight.lazy_shape()
    Shape([4, 16])
    """

    d_input: int
    d_output: int
    bias: bool = True
    initializer: Initializer = KaimingUniform(gain=1.0 / math.sqrt(3.0), fan_out_only=False)

    def validate(self) -> None:
        if self.d_input <= 0 or self.d_output <= 0:
            raise ConfigError(
                f"ember: LinearConfig: d_input and d_output must be > 0, got {self.d_input}, {self.d_output}"
            )

    def init(self, device: Device | None = None) -> Linear:
        """A Linear layer with lazily initialised parameters on ``device``."""
        device = device or Device.default()
        weight = self.initializer.lazy((self.d_input, self.d_output), self.d_input, self.d_output, device)
        bias = self.initializer.lazy((self.d_output,), self.d_input, self.d_output, device) if self.bias else None
        return Linear(weight=weight, bias=bias)


class Linear(Module):
    """A fully connected layer. Build with ``LinearConfig(d_input, d_output).init(device)``
    or from given tensors: ``Linear(weight=Param.from_tensor(w), bias=Param.from_tensor(b))``."""

    weight: Param
    bias: Param | None = None

    def forward(self, x: Tensor) -> Tensor:
        """``x`` of shape ``[..., d_input]`` to ``[..., d_output]``."""
        bias = self.bias
        return linear(x, self.weight.val(), None if bias is None else bias.val())

    def quantized(self, scheme: QuantScheme, input_scale: float | None = None) -> QuantizedLinear:
        """This layer with its weight quantized by ``scheme`` (see ``Module.quantize``)."""
        return QuantizedLinear.from_weight(self.weight.val(), self.bias, scheme, input_scale)

    def adapt_pytorch(self, field: str, array: np.ndarray) -> np.ndarray:
        """PyTorch stores the weight as ``[d_output, d_input]``: transposed here."""
        return array.T if field == "weight" and array.ndim == 2 else array

    def export_pytorch(self, field: str, array: np.ndarray) -> np.ndarray:
        """Back to PyTorch's ``[d_output, d_input]``."""
        return array.T if field == "weight" and array.ndim == 2 else array

    @property
    def d_input(self) -> int:
        return self.weight.lazy_shape()[0]

    @property
    def d_output(self) -> int:
        return self.weight.lazy_shape()[1]

    def extra_repr(self) -> str:
        return f"d_input: {self.d_input}, d_output: {self.d_output}, bias: {self.bias is not None}"
