"""``Conv1d``: 1-d convolution over ``[batch, channels, length]``."""

from __future__ import annotations

import math

from ember.device import Device
from ember.module import Config, Module, Param
from ember.nn.conv.checks import PaddingSpec, as_tuple, check_groups, check_padding, conv_params, describe_conv
from ember.nn.init import Initializer, KaimingUniform
from ember.nn.quantized.conv import QuantizedConv1d, quantized_parts
from ember.tensor import Tensor
from ember.tensor.layer_ops import conv1d
from ember.tensor.quant import QuantScheme


class Conv1dConfig(Config):
    """Configuration of :class:`Conv1d` (Burn's field names).

    >>> Conv1dConfig(4, 8, 3, padding="same").init().weight.lazy_shape()
    Shape([8, 4, 3])
    """

    channels_in: int
    channels_out: int
    kernel_size: int
    stride: int = 1
    dilation: int = 1
    groups: int = 1
    padding: PaddingSpec = "valid"
    bias: bool = True
    initializer: Initializer = KaimingUniform(gain=1.0 / math.sqrt(3.0), fan_out_only=False)

    def validate(self) -> None:
        as_tuple("Conv1dConfig", "kernel_size", self.kernel_size, 1)
        as_tuple("Conv1dConfig", "stride", self.stride, 1)
        as_tuple("Conv1dConfig", "dilation", self.dilation, 1)
        check_padding("Conv1dConfig", self.padding, 1)
        check_groups("Conv1dConfig", self.channels_in, self.channels_out, self.groups)

    def init(self, device: Device | None = None) -> Conv1d:
        """A Conv1d with lazily initialised parameters on ``device``."""
        device = device or Device.default()
        g = self.groups
        weight, bias = conv_params(
            self.initializer,
            (self.channels_out, self.channels_in // g, self.kernel_size),
            self.channels_in // g * self.kernel_size,
            self.channels_out // g * self.kernel_size,
            self.bias,
            device,
        )
        return Conv1d(
            weight=weight, bias=bias, stride=self.stride, padding=self.padding, dilation=self.dilation, groups=g
        )


class Conv1d(Module):
    """1-d convolution; weight ``[channels_out, channels_in / groups, kernel]``. Build
    with :class:`Conv1dConfig` or from tensors: ``Conv1d(weight=Param.from_tensor(w))``."""

    weight: Param
    bias: Param | None = None
    stride: int = 1
    padding: PaddingSpec = "valid"
    dilation: int = 1
    groups: int = 1

    def forward(self, x: Tensor) -> Tensor:
        """``[batch, channels_in, length]`` to ``[batch, channels_out, length_out]``."""
        bias = self.bias
        return conv1d(
            x,
            self.weight.val(),
            None if bias is None else bias.val(),
            self.stride,
            self.padding,
            self.dilation,
            self.groups,
        )

    def quantized(self, scheme: QuantScheme, input_scale: float | None = None) -> QuantizedConv1d:
        """This layer with its weight quantized per output channel (see ``Module.quantize``)."""
        parts = quantized_parts(self.weight.val(), self.bias, scheme, input_scale)
        return QuantizedConv1d(
            **parts, stride=self.stride, padding=self.padding, dilation=self.dilation, groups=self.groups
        )

    @property
    def kernel_size(self) -> int:
        return self.weight.lazy_shape()[2]

    def extra_repr(self) -> str:
        shape = self.weight.lazy_shape()
        return describe_conv(self, shape[1] * self.groups, shape[0])
