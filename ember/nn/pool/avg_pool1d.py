"""``AvgPool1d``: the mean over windows of ``[batch, channels, length]``."""

from __future__ import annotations

from typing import Any

from ember.module import Config, Module
from ember.nn.conv.checks import PaddingSpec, as_tuple, check_padding
from ember.tensor import Tensor
from ember.tensor.layer_ops import avg_pool1d


class AvgPool1dConfig(Config):
    """Configuration of :class:`AvgPool1d` (Burn's fields: ``stride`` defaults to the
    kernel size).

    >>> AvgPool1dConfig(3, stride=1, padding=1).init()(Tensor.ones([1, 1, 4])).tolist()
    [[[0.6666666865348816, 1.0, 1.0, 0.6666666865348816]]]
    """

    kernel_size: int
    stride: int | None = None
    padding: PaddingSpec = "valid"
    count_include_pad: bool = True
    ceil_mode: bool = False

    def validate(self) -> None:
        as_tuple("AvgPool1dConfig", "kernel_size", self.kernel_size, 1)
        as_tuple("AvgPool1dConfig", "stride", self.kernel_size if self.stride is None else self.stride, 1)
        check_padding("AvgPool1dConfig", self.padding, 1)

    def init(self, device: Any = None) -> AvgPool1d:
        """The layer (it has no parameters, so ``device`` is ignored)."""
        stride = self.kernel_size if self.stride is None else self.stride
        return AvgPool1d(self.kernel_size, stride, self.padding, self.count_include_pad, self.ceil_mode)


class AvgPool1d(Module):
    """1-d average pooling (see :func:`ember.tensor.layer_ops.avg_pool1d`)."""

    kernel_size: int
    stride: int | None = None
    padding: PaddingSpec = "valid"
    count_include_pad: bool = True
    ceil_mode: bool = False

    def forward(self, x: Tensor) -> Tensor:
        return avg_pool1d(x, self.kernel_size, self.stride, self.padding, self.count_include_pad, self.ceil_mode)
