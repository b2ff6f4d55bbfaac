"""``AdaptiveAvgPool2d``: average pooling to a fixed output size."""

from __future__ import annotations

from typing import Any

from ember.module import Config, Module
from ember.nn.conv.checks import as_tuple
from ember.tensor import Tensor
from ember.tensor.layer_ops import adaptive_avg_pool2d


class AdaptiveAvgPool2dConfig(Config):
    """Configuration of :class:`AdaptiveAvgPool2d`.

    >>> AdaptiveAvgPool2dConfig((1, 1)).init()(Tensor.ones([2, 3, 5, 7])).dims()
    [2, 3, 1, 1]
    """

    output_size: int | tuple[int, int]

    def validate(self) -> None:
        as_tuple("AdaptiveAvgPool2dConfig", "output_size", self.output_size, 2)

    def init(self, device: Any = None) -> AdaptiveAvgPool2d:
        return AdaptiveAvgPool2d(as_tuple("AdaptiveAvgPool2dConfig", "output_size", self.output_size, 2))


class AdaptiveAvgPool2d(Module):
    """``[batch, channels, height, width]`` to ``[batch, channels, *output_size]`` with
    PyTorch's window bounds."""

    output_size: tuple[int, int]

    def forward(self, x: Tensor) -> Tensor:
        return adaptive_avg_pool2d(x, self.output_size)
