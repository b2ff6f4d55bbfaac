"""``Conv2d``: 2-d convolution over ``[batch, channels, height, width]``."""

from __future__ import annotations

import math

from ember.device import Device
from ember.module import Config, Module, Param
from ember.nn.conv.checks import PaddingSpec, as_tuple, check_groups, check_padding, conv_params, describe_conv
from ember.nn.init import Initializer, KaimingUniform
from ember.nn.quantized.conv import QuantizedConv2d, quantized_parts
from ember.tensor import Tensor
from ember.tensor.layer_ops import conv2d
from ember.tensor.quant import QuantScheme


class Conv2dConfig(Config):
    """Configuration of :class:`Conv2d`. ``channels`` is ``(in, out)``; ``padding`` is
    ``"valid"`` (Burn's default), ``"same"``, an int or per-dim values. The default
    initializer matches PyTorch's (uniform on ``±1/sqrt(fan_in)``).

    >>> Conv2dConfig((3, 8), 3, padding="same").init().weight.lazy_shape()
    Shape([8, 3, 3, 3])
    """

    channels: tuple[int, int]
    kernel_size: int | tuple[int, int]
    stride: int | tuple[int, int] = (1, 1)
    dilation: int | tuple[int, int] = (1, 1)
    groups: int = 1
    padding: PaddingSpec = "valid"
    bias: bool = True
    initializer: Initializer = KaimingUniform(gain=1.0 / math.sqrt(3.0), fan_out_only=False)

    def validate(self) -> None:
        as_tuple("Conv2dConfig", "kernel_size", self.kernel_size, 2)
        as_tuple("Conv2dConfig", "stride", self.stride, 2)
        as_tuple("Conv2dConfig", "dilation", self.dilation, 2)
        check_padding("Conv2dConfig", self.padding, 2)
        check_groups("Conv2dConfig", self.channels[0], self.channels[1], self.groups)

    def init(self, device: Device | None = None) -> Conv2d:
        """A Conv2d with lazily initialised parameters on ``device``."""
        device = device or Device.default()
        c_in, c_out = self.channels
        kernel = as_tuple("Conv2dConfig", "kernel_size", self.kernel_size, 2)
        k = kernel[0] * kernel[1]
        weight, bias = conv_params(
            self.initializer,
            (c_out, c_in // self.groups) + kernel,
            c_in // self.groups * k,
            c_out // self.groups * k,
            self.bias,
            device,
        )
        return Conv2d(
            weight=weight,
            bias=bias,
            stride=as_tuple("Conv2dConfig", "stride", self.stride, 2),
            padding=self.padding,
            dilation=as_tuple("Conv2dConfig", "dilation", self.dilation, 2),
            groups=self.groups,
        )


class Conv2d(Module):
    """2-d convolution; weight ``[channels_out, channels_in / groups, kernel_h, kernel_w]``.
    Build with :class:`Conv2dConfig` or from tensors:
    ``Conv2d(weight=Param.from_tensor(w), bias=Param.from_tensor(b), padding=1)``."""

    weight: Param
    bias: Param | None = None
    stride: tuple[int, int] = (1, 1)
    padding: PaddingSpec = "valid"
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1

    def forward(self, x: Tensor) -> Tensor:
        """``[batch, channels_in, height, width]`` to ``[batch, channels_out, height_out, width_out]``."""
        bias = self.bias
        return conv2d(
            x,
            self.weight.val(),
            None if bias is None else bias.val(),
            self.stride,
            self.padding,
            self.dilation,
            self.groups,
        )

    def quantized(self, scheme: QuantScheme, input_scale: float | None = None) -> QuantizedConv2d:
        """This layer with its weight quantized per output channel (see ``Module.quantize``)."""
        parts = quantized_parts(self.weight.val(), self.bias, scheme, input_scale)
        return QuantizedConv2d(
            **parts, stride=self.stride, padding=self.padding, dilation=self.dilation, groups=self.groups
        )

    @property
    def kernel_size(self) -> tuple[int, int]:
        return tuple(self.weight.lazy_shape()[2:])

    def extra_repr(self) -> str:
        shape = self.weight.lazy_shape()
        return describe_conv(self, shape[1] * self.groups, shape[0])
