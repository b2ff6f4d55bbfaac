"""``QuantizedLinear``: a :class:`~ember.nn.Linear` whose weight is quantized.

The weight is stored as PyTorch stores it, ``[d_output, d_input]``, one row per output
channel, so that per-channel scales are per row and the kernels read rows. On flex the
forward never materialises the float weight (``ember.tensor.quant.quantized_linear``);
on the other devices it dequantizes with tensor ops first.

>>> from ember.nn import LinearConfig
>>> from ember.tensor.quant import QuantScheme
>>> layer = LinearConfig(64, 8).init().quantized(QuantScheme.int4(block=32))
>>> layer.weight.dims(), layer.values.val().dims()
([8, 64], [8, 32])
"""

from __future__ import annotations

from ember.module import Module, Param
from ember.nn.quantized.weight import qtensor, quantized_fields
from ember.tensor import Tensor
from ember.tensor.quant import QuantizedTensor, QuantScheme, quantized_linear


class QuantizedLinear(Module):
    """``y = x @ dequantize(weight).T + bias``; built by ``Linear.quantized(scheme)`` or
    ``model.quantize(scheme)``."""

    values: Param
    scales: Param
    zero_points: Param | None
    bias: Param | None
    input_scale: Param | None
    scheme: QuantScheme
    d_input: int
    d_output: int

    @staticmethod
    def from_weight(
        weight: Tensor, bias: Param | None, scheme: QuantScheme, input_scale: float | None = None
    ) -> QuantizedLinear:
        """From a float weight ``[d_input, d_output]`` (``Linear``'s layout)."""
        d_input, d_output = weight.dims()
        fields = quantized_fields(weight.swap_dims(0, 1), bias, scheme, input_scale)
        return QuantizedLinear(**fields, scheme=scheme, d_input=d_input, d_output=d_output)

    @property
    def weight(self) -> QuantizedTensor:
        """The quantized weight ``[d_output, d_input]``."""
        return qtensor(self.values, self.scales, self.zero_points, self.scheme, (self.d_output, self.d_input))

    def forward(self, x: Tensor) -> Tensor:
        """``x`` of shape ``[..., d_input]`` to ``[..., d_output]``."""
        bias, scale = self.bias, self.input_scale
        return quantized_linear(
            x, self.weight, None if bias is None else bias.val(), None if scale is None else scale.val()
        )

    def dequantize(self) -> Module:
        """The float ``Linear`` this layer approximates."""
        from ember.nn.linear import Linear

        weight = self.weight.dequantize().swap_dims(0, 1)
        return Linear(weight=Param.from_tensor(weight), bias=self.bias)

    def extra_repr(self) -> str:
        return f"d_input: {self.d_input}, d_output: {self.d_output}, scheme: {self.scheme!r}"
