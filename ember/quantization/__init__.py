"""Post-training quantization: int8 and int4 weights, smaller and faster on CPU.

The pieces live in the layers they belong to and are gathered here:

* :class:`QuantScheme` and :class:`QuantizedTensor` (packed values, scales, zero points;
  ``ember.tensor.quant``), :func:`quantize` and :func:`quantized_linear`;
* the kernels (flex's LLVM kernels in ``ember.backend.flex.quant_kernels``: int8/int4
  weight-only GEMV/GEMM dequantizing in registers, dynamic int8 x int8 with VNNI);
* ``Module.quantize`` (``ember.module.quantize``) and the quantized layers
  (``ember.nn.quantized``), embeddings and their tied heads included on request
  (``include_embeddings=True``).

>>> from ember.nn import LinearConfig
>>> layer = LinearConfig(64, 16).init()
>>> q = layer.quantize(QuantScheme.int8(), ParamGroup.all())
>>> type(q).__name__, q.weight.dtype
('QuantizedLinear', 'qint8')
"""

from ember.module.group import ParamGroup
from ember.module.quantize import DEFAULT_GROUP, HEAD_NAMES, schemes_of
from ember.nn.quantized import QuantizedConv1d, QuantizedConv2d, QuantizedEmbedding, QuantizedLinear
from ember.tensor.quant import QuantizedTensor, QuantScheme, quantize, quantized_linear

__all__ = [
    "DEFAULT_GROUP",
    "HEAD_NAMES",
    "ParamGroup",
    "QuantScheme",
    "QuantizedConv1d",
    "QuantizedConv2d",
    "QuantizedEmbedding",
    "QuantizedLinear",
    "QuantizedTensor",
    "quantize",
    "quantized_linear",
    "schemes_of",
]
