"""Layers with quantized weights (built by ``Module.quantize``; see ``ember.quantization``)."""

from ember.nn.quantized.conv import QuantizedConv, QuantizedConv1d, QuantizedConv2d
from ember.nn.quantized.embedding import QuantizedEmbedding
from ember.nn.quantized.linear import QuantizedLinear

__all__ = ["QuantizedConv", "QuantizedConv1d", "QuantizedConv2d", "QuantizedEmbedding", "QuantizedLinear"]
