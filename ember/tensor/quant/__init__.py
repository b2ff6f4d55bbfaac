"""Quantized tensors at the tensor layer: the scheme, the packed tensor type and the
quantized linear op (its composite; backends may run it as one kernel)."""

from ember.tensor.quant.linear import quantized_linear
from ember.tensor.quant.qtensor import QuantizedTensor, dequantize_parts, quantize, quantize_array
from ember.tensor.quant.scheme import QuantScheme

__all__ = ["QuantScheme", "QuantizedTensor", "dequantize_parts", "quantize", "quantize_array", "quantized_linear"]
