"""``QuantizedConv1d`` and ``QuantizedConv2d``: convolutions with a quantized weight.

The weight ``[channels_out, channels_in / groups, *kernel]`` is stored as a matrix
``[channels_out, channels_in / groups * prod(kernel)]`` quantized per row (per output
channel), so a block runs along the flattened input channels and kernel taps. The
forward is :func:`ember.tensor.quant.conv.quantized_conv` (flex: compiled im2col and the
packed-weight GEMM; elsewhere the input's sliding blocks times the packed weight through
``quantized_linear``; the float weight is never built). A static activation scheme runs the int8 x
int8 product with its calibrated scale; a dynamic one rounds the input to the int8 grid
first, one scale per sample, then runs the weight-only product.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ember.module import Module, Param
from ember.nn.quantized.weight import qtensor, quantized_fields
from ember.tensor import Tensor
from ember.tensor.quant import QuantizedTensor, QuantScheme
from ember.tensor.quant.conv import quantized_conv
from ember.tensor.quant.linear import fake_quantize_int8


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

    def quantized_input(self, x: Tensor) -> Tensor:
        """``x`` on the int8 grid of a dynamic or static activation scheme (per sample)."""
        if not self.scheme.activations:
            return x
        scale = self.input_scale
        if scale is not None:
            return fake_quantize_int8(x, scale.val())
        batch = x.dims()[0]
        return fake_quantize_int8(x.reshape([batch, -1]), None).reshape(x.dims())

    def forward(self, x: Tensor) -> Tensor:
        """The convolution of the (quantized) input with the packed weight: a static scheme
        as an int8 x int8 product (its one calibrated scale for every value), a dynamic one
        as the weight-only product of the input rounded per sample."""
        bias = self.bias
        weight = self.weight
        scale = self.input_scale
        static = self.scheme.activations == "static" and scale is not None
        if self.scheme.activations and not static:  # the input is on the int8 grid already: a weight-only product
            scheme = dataclasses.replace(self.scheme, activations=None)
            weight = QuantizedTensor(weight.values, weight.scales, weight.zero_points, scheme, weight.dims())
        return quantized_conv(
            x if static else self.quantized_input(x),
            weight,
            self.kernel_shape,
            None if bias is None else bias.val(),
            self.stride,
            self.padding,
            self.dilation,
            self.groups,
            input_scale=scale.val() if static and scale is not None else None,
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
