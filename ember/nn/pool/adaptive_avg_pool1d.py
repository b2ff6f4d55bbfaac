"""``AdaptiveAvgPool1d``: average pooling to a fixed output length."""

from __future__ import annotations

from typing import Any

from ember.module import Config, Module
from ember.nn.conv.checks import as_tuple
from ember.tensor import Tensor
from ember.tensor.layer_ops import adaptive_avg_pool1d


class AdaptiveAvgPool1dConfig(Config):
    """Configuration of :class:`AdaptiveAvgPool1d`.

    >>> AdaptiveAvgPool1dConfig(2).init()(Tensor.ones([2, 3, 5])).dims()
    [2, 3, 2]
    """

    output_size: int

    def validate(self) -> None:
        as_tuple("AdaptiveAvgPool1dConfig", "output_size", self.output_size, 1)

    def init(self, device: Any = None) -> AdaptiveAvgPool1d:
        return AdaptiveAvgPool1d(self.output_size)


class AdaptiveAvgPool1d(Module):
    """``[batch, channels, length]`` to ``[batch, channels, output_size]``."""

    output_size: int

    def forward(self, x: Tensor) -> Tensor:
        return adaptive_avg_pool1d(x, self.output_size)
