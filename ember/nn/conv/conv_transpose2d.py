"""``ConvTranspose2d``: 2-d transposed convolution (the adjoint of :class:`Conv2d`)."""

from __future__ import annotations

import math

from ember.device import Device
from ember.module import Config, Module, Param
from ember.nn.conv.checks import as_tuple, check_groups, check_padding_out, conv_transpose_params, describe_conv
from ember.nn.init import Initializer, KaimingUniform
from ember.tensor import Tensor
from ember.tensor.layer_ops import conv_transpose2d


class ConvTranspose2dConfig(Config):
    """Configuration of :class:`ConvTranspose2d`. ``channels`` is ``(in, out)``;
    ``padding_out`` (PyTorch's ``output_padding``) extends the output at the end.

    >>> ConvTranspose2dConfig((8, 4), 2, stride=2).init().weight.lazy_shape()
    Shape([8, 4, 2, 2])
    """

    channels: tuple[int, int]
    kernel_size: int | tuple[int, int]
    stride: int | tuple[int, int] = (1, 1)
    dilation: int | tuple[int, int] = (1, 1)
    groups: int = 1
    padding: int | tuple[int, int] = (0, 0)
    padding_out: int | tuple[int, int] = (0, 0)
    bias: bool = True
    initializer: Initializer = KaimingUniform(gain=1.0 / math.sqrt(3.0), fan_out_only=False)

    def validate(self) -> None:
        name = "ConvTranspose2dConfig"
        as_tuple(name, "kernel_size", self.kernel_size, 2)
        as_tuple(name, "padding", self.padding, 2, minimum=0)
        check_padding_out(name, self.padding_out, self.stride, self.dilation, 2)
        check_groups(name, self.channels[0], self.channels[1], self.groups)

    def init(self, device: Device | None = None) -> ConvTranspose2d:
        """A ConvTranspose2d with lazily initialised parameters on ``device``."""
        name = "ConvTranspose2dConfig"
        kernel = as_tuple(name, "kernel_size", self.kernel_size, 2)
        weight, bias = conv_transpose_params(
            self.initializer, *self.channels, kernel, self.groups, self.bias, device or Device.default()
        )
        return ConvTranspose2d(
            weight=weight,
            bias=bias,
            stride=as_tuple(name, "stride", self.stride, 2),
            padding=as_tuple(name, "padding", self.padding, 2, minimum=0),
            padding_out=as_tuple(name, "padding_out", self.padding_out, 2, minimum=0),
            dilation=as_tuple(name, "dilation", self.dilation, 2),
            groups=self.groups,
        )


class ConvTranspose2d(Module):
    """2-d transposed convolution; weight ``[channels_in, channels_out / groups,
    kernel_h, kernel_w]``. Build with :class:`ConvTranspose2dConfig` or from tensors."""

    weight: Param
    bias: Param | None = None
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    padding_out: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1

    def forward(self, x: Tensor) -> Tensor:
        """``[batch, channels_in, height, width]`` to ``[batch, channels_out, height_out, width_out]``."""
        bias = self.bias
        return conv_transpose2d(
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
    def kernel_size(self) -> tuple[int, int]:
        return tuple(self.weight.lazy_shape()[2:])

    def extra_repr(self) -> str:
        shape = self.weight.lazy_shape()
        return describe_conv(self, shape[0], shape[1] * self.groups) + f", padding_out: {self.padding_out}"
