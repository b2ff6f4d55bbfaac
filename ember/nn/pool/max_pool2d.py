"""``MaxPool2d``: the maximum over windows of ``[batch, channels, height, width]``."""

from __future__ import annotations

from typing import Any

from ember.module import Config, Module
from ember.nn.conv.checks import PaddingSpec, as_tuple, check_padding
from ember.tensor import Tensor
from ember.tensor.layer_ops import max_pool2d, max_pool2d_with_indices


class MaxPool2dConfig(Config):
    """Configuration of :class:`MaxPool2d` (Burn's fields: ``strides`` defaults to the
    kernel size; ``padding`` as for convolutions, never winning the maximum).

    >>> MaxPool2dConfig(2).init()
    MaxPool2d {kernel_size: (2, 2), stride: (2, 2), padding: 'valid', dilation: (1, 1), ceil_mode: False}
    """

    kernel_size: int | tuple[int, int]
    strides: int | tuple[int, int] | None = None
    padding: PaddingSpec = "valid"
    dilation: int | tuple[int, int] = (1, 1)
    ceil_mode: bool = False

    def validate(self) -> None:
        as_tuple("MaxPool2dConfig", "kernel_size", self.kernel_size, 2)
        if self.strides is not None:
            as_tuple("MaxPool2dConfig", "strides", self.strides, 2)
        as_tuple("MaxPool2dConfig", "dilation", self.dilation, 2)
        check_padding("MaxPool2dConfig", self.padding, 2)

    def init(self, device: Any = None) -> MaxPool2d:
        """The layer (it has no parameters, so ``device`` is ignored)."""
        kernel = as_tuple("MaxPool2dConfig", "kernel_size", self.kernel_size, 2)
        stride = kernel if self.strides is None else as_tuple("MaxPool2dConfig", "strides", self.strides, 2)
        return MaxPool2d(
            kernel_size=kernel,
            stride=stride,
            padding=self.padding,
            dilation=as_tuple("MaxPool2dConfig", "dilation", self.dilation, 2),
            ceil_mode=self.ceil_mode,
        )


class MaxPool2d(Module):
    """2-d max pooling (see :func:`ember.tensor.layer_ops.max_pool2d`)."""

    kernel_size: tuple[int, int]
    stride: tuple[int, int] | None = None
    padding: PaddingSpec = "valid"
    dilation: tuple[int, int] = (1, 1)
    ceil_mode: bool = False

    def forward(self, x: Tensor) -> Tensor:
        return max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)

    def forward_with_indices(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The pooled values and the int64 flat input position of each maximum."""
        return max_pool2d_with_indices(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)
