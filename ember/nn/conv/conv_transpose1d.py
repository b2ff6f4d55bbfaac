"""``ConvTranspose1d``: 1-d transposed convolution (the adjoint of :class:`Conv1d`)."""

from __future__ import annotations

import math

from ember.device import Device
from ember.module import Config, Module, Param
from ember.nn.conv.checks import as_tuple, check_groups, check_padding_out, conv_transpose_params, describe_conv
from ember.nn.init import Initializer, KaimingUniform
from ember.tensor import Tensor
from ember.tensor.layer_ops import conv_transpose1d


class ConvTranspose1dConfig(Config):
    """Configuration of :class:`ConvTranspose1d`. ``channels`` is ``(in, out)``.

    >>> ConvTranspose1dConfig((8, 4), 3, stride=2).init().weight.lazy_shape()
    Shape([8, 4, 3])
    """

    channels: tuple[int, int]
    kernel_size: int
    stride: int = 1
    dilation: int = 1
    groups: int = 1
    padding: int = 0
    padding_out: int = 0
    bias: bool = True
    initializer: Initializer = KaimingUniform(gain=1.0 / math.sqrt(3.0), fan_out_only=False)

    def validate(self) -> None:
        name = "ConvTranspose1dConfig"
        as_tuple(name, "kernel_size", self.kernel_size, 1)
        as_tuple(name, "padding", self.padding, 1, minimum=0)
        check_padding_out(name, self.padding_out, self.stride, self.dilation, 1)
        check_groups(name, self.channels[0], self.channels[1], self.groups)

    def init(self, device: Device | None = None) -> ConvTranspose1d:
        """A ConvTranspose1d with lazily initialised parameters on ``device``."""
        weight, bias = conv_transpose_params(
            self.initializer, *self.channels, (self.kernel_size,), self.groups, self.bias, device or Device.default()
        )
        return ConvTranspose1d(
            weight=weight,
            bias=bias,
            stride=self.stride,
            padding=self.padding,
            padding_out=self.padding_out,
            dilation=self.dilation,
            groups=self.groups,
        )


class ConvTranspose1d(Module):
    """1-d transposed convolution; weight ``[channels_in, channels_out / groups, kernel]``."""

    weight: Param
    bias: Param | None = None
    stride: int = 1
    padding: int = 0
    padding_out: int = 0
    dilation: int = 1
    groups: int = 1

    def forward(self, x: Tensor) -> Tensor:
        """``[batch, channels_in, length]`` to ``[batch, channels_out, length_out]``."""
        bias = self.bias
        return conv_transpose1d(
            x,
            self.weight.val(),
            None if bias is None else bias.val(),
            self.stride,
            self.padding,
            self.padding_out,
            self.dilation,
            self.groups,
        )

    @property
    def kernel_size(self) -> int:
        return self.weight.lazy_shape()[2]

    def extra_repr(self) -> str:
        shape = self.weight.lazy_shape()
        return describe_conv(self, shape[0], shape[1] * self.groups) + f", padding_out: {self.padding_out}"
