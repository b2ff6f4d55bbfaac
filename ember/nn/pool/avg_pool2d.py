"""``AvgPool2d``: the mean over windows of ``[batch, channels, height, width]``."""

from __future__ import annotations

from typing import Any

from ember.module import Config, Module
from ember.nn.conv.checks import PaddingSpec, as_tuple, check_padding
from ember.tensor import Tensor
from ember.tensor.layer_ops import avg_pool2d


class AvgPool2dConfig(Config):
    """Configuration of :class:`AvgPool2d` (Burn's fields: ``strides`` defaults to the
    kernel size; the divisor counts padding when ``count_include_pad``).

    >>> AvgPool2dConfig(2).init()
    AvgPool2d {kernel_size: (2, 2), stride: (2, 2), padding: 'valid', count_include_pad: True, ceil_mode: False}
    """

    kernel_size: int | tuple[int, int]
    strides: int | tuple[int, int] | None = None
    padding: PaddingSpec = "valid"
    count_include_pad: bool = True
    ceil_mode: bool = False

    def validate(self) -> None:
        as_tuple("AvgPool2dConfig", "kernel_size", self.kernel_size, 2)
        if self.strides is not None:
            as_tuple("AvgPool2dConfig", "strides", self.strides, 2)
        check_padding("AvgPool2dConfig", self.padding, 2)

    def init(self, device: Any = None) -> AvgPool2d:
        """The layer (it has no parameters, so ``device`` is ignored)."""
        kernel = as_tuple("AvgPool2dConfig", "kernel_size", self.kernel_size, 2)
        stride = kernel if self.strides is None else as_tuple("AvgPool2dConfig", "strides", self.strides, 2)
        return AvgPool2d(kernel, stride, self.padding, self.count_include_pad, self.ceil_mode)


class AvgPool2d(Module):
    """2-d average pooling (see :func:`ember.tensor.layer_ops.avg_pool2d`)."""

    kernel_size: tuple[int, int]
    stride: tuple[int, int] | None = None
    padding: PaddingSpec = "valid"
    count_include_pad: bool = True
    ceil_mode: bool = False

    def forward(self, x: Tensor) -> Tensor:
        return avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.count_include_pad, self.ceil_mode)
