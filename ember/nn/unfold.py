"""``Unfold4d``: sliding blocks as columns (Burn's name; ``torch.nn.Unfold``)."""

from __future__ import annotations

from typing import Any

from ember.module import Config, Module
from ember.nn.conv.checks import as_tuple
from ember.tensor import Tensor
from ember.tensor.unfold import unfold4d


class Unfold4dConfig(Config):
    """Configuration of :class:`Unfold4d`.

    >>> Unfold4dConfig((2, 2)).init()(Tensor.ones([1, 3, 4, 4])).dims()
    [1, 12, 9]
    """

    kernel_size: int | tuple[int, int]
    stride: int | tuple[int, int] = 1
    dilation: int | tuple[int, int] = 1
    padding: int | tuple[int, int] = 0

    def validate(self) -> None:
        as_tuple("Unfold4dConfig", "kernel_size", self.kernel_size, 2)

    def init(self, device: Any = None) -> Unfold4d:
        """The layer (it has no parameters, so ``device`` is ignored)."""
        return Unfold4d(
            as_tuple("Unfold4dConfig", "kernel_size", self.kernel_size, 2),
            as_tuple("Unfold4dConfig", "stride", self.stride, 2),
            as_tuple("Unfold4dConfig", "dilation", self.dilation, 2),
            as_tuple("Unfold4dConfig", "padding", self.padding, 2, 0),
        )


class Unfold4d(Module):
    """``[batch, channels, height, width]`` to ``[batch, channels * kh * kw, blocks]``."""

    kernel_size: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)

    def forward(self, x: Tensor) -> Tensor:
        return unfold4d(x, self.kernel_size, self.stride, self.padding, self.dilation)


Unfold = Unfold4d
