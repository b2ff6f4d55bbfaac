"""``QuantizedConv1d`` and ``QuantizedConv2d``: convolutions with a quantized weight.

The weight ``[channels_out, channels_in / groups, *kernel]`` is stored as a matrix
``[channels_out, channels_in / groups * prod(kernel)]`` quantized per row (per output
channel), so a block runs along the flattened input channels and kernel taps. The
forward is :func:`ember.tensor.quant.conv.quantized_conv` (flex: compiled im2col and the
packed-weight GEMM; elsewhere the input's sliding blocks times the packed weight through
``quantized_linear``; the float weight is never built). An activation scheme runs the
int8 x int8 product with one scale per sample (dynamic) or the calibrated one (static).
"""

from __future__ import annotations

import math
from typing import Any

from ember.module import Module, Param
from ember.nn.quantized.weight import qtensor, quantized_fields
from ember.tensor import Tensor
from ember.tensor.quant import QuantizedTensor, QuantScheme
from ember.tensor.quant.conv import quantized_conv


class QuantizedConv(Module):
    """The fields and forward both convolutions share (they differ in their defaults);
    build one with ``Conv2d.quantized(scheme)``."""

    values: Param
    scales: Param
    zero_points: Param | None
    bias: Param | None
    input_scale: Param | None
    scheme: QuantScheme
    kernel_shape: tuple[int, ...]
    stride: Any
    padding: object
    dilation: Any
    groups: int

    @property
    def weight(self) -> QuantizedTensor:
        """The quantized weight as a matrix ``[channels_out, rest]``."""
        out = self.kernel_shape[0]
        return qtensor(self.values, self.scales, self.zero_points, self.scheme, (out, math.prod(self.kernel_shape[1:])))

    def float_weight(self) -> Tensor:
        return self.weight.dequantize().reshape(list(self.kernel_shape))

    def forward(self, x: Tensor) -> Tensor:
        """The convolution of the input with the packed weight, an int8 x int8 product for an
        activation scheme: one scale per sample (dynamic) or the calibrated one (static)."""
        bias = self.bias
        scale = self.input_scale
        return quantized_conv(
            x,
            self.weight,
            self.kernel_shape,
            None if bias is None else bias.val(),
            self.stride,
            self.padding,
            self.dilation,
            self.groups,
            input_scale=scale.val() if self.scheme.activations == "static" and scale is not None else None,
            per_sample=True,
        )


def quantized_parts(weight: Tensor, bias: Param | None, scheme: QuantScheme, input_scale: float | None) -> dict:
    """The shared fields of a quantized convolution with float ``weight``
    ``[channels_out, channels_in / groups, *kernel]`` (quantized as a matrix, per row)."""
    dims = weight.dims()
    fields = quantized_fields(weight.reshape([dims[0], -1]), bias, scheme, input_scale)
    return dict(fields, scheme=scheme, kernel_shape=tuple(dims))


class QuantizedConv1d(QuantizedConv):
    """A :class:`~ember.nn.Conv1d` with a quantized weight."""

    stride: int = 1
    padding: object = "valid"
    dilation: int = 1
    groups: int = 1


class QuantizedConv2d(QuantizedConv):
    """A :class:`~ember.nn.Conv2d` with a quantized weight."""

    stride: tuple[int, int] = (1, 1)
    padding: object = "valid"
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
