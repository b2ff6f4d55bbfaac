"""``AvgPool3d``: the mean over windows of ``[batch, channels, depth, height, width]``."""

from __future__ import annotations

from typing import Any

from ember.module import Config, Module
from ember.nn.conv.checks import PaddingSpec, as_tuple, check_padding
from ember.tensor import Tensor
from ember.tensor.pool3d import avg_pool3d


class AvgPool3dConfig(Config):
    """Configuration of :class:`AvgPool3d` (Burn's fields: ``strides`` defaults to the
    kernel size; the divisor counts padding when ``count_include_pad``).

    >>> AvgPool3dConfig(2).init()
    AvgPool3d {kernel_size: (2, 2, 2), stride: (2, 2, 2), padding: 'valid', count_include_pad: True, ceil_mode: False}
    """

    kernel_size: int | tuple[int, int, int]
    strides: int | tuple[int, int, int] | None = None
    padding: PaddingSpec = "valid"
    count_include_pad: bool = True
    ceil_mode: bool = False

    def validate(self) -> None:
        as_tuple("AvgPool3dConfig", "kernel_size", self.kernel_size, 3)
        if self.strides is not None:
            as_tuple("AvgPool3dConfig", "strides", self.strides, 3)
        check_padding("AvgPool3dConfig", self.padding, 3)

    def init(self, device: Any = None) -> AvgPool3d:
        """The layer (it has no parameters, so ``device`` is ignored)."""
        kernel = as_tuple("AvgPool3dConfig", "kernel_size", self.kernel_size, 3)
        stride = kernel if self.strides is None else as_tuple("AvgPool3dConfig", "strides", self.strides, 3)
        return AvgPool3d(kernel, stride, self.padding, self.count_include_pad, self.ceil_mode)


class AvgPool3d(Module):
    """3-d average pooling (see :func:`ember.tensor.layer_ops.avg_pool3d`)."""

    kernel_size: tuple[int, int, int]
    stride: tuple[int, int, int] | None = None
    padding: PaddingSpec = "valid"
    count_include_pad: bool = True
    ceil_mode: bool = False

    def forward(self, x: Tensor) -> Tensor:
        return avg_pool3d(x, self.kernel_size, self.stride, self.padding, self.count_include_pad, self.ceil_mode)
