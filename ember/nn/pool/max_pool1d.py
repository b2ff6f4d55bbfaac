"""``MaxPool1d``: the maximum over windows of ``[batch, channels, length]``."""

from __future__ import annotations

from typing import Any

from ember.module import Config, Module
from ember.nn.conv.checks import PaddingSpec, as_tuple, check_padding
from ember.tensor import Tensor
from ember.tensor.layer_ops import max_pool1d, max_pool1d_with_indices


class MaxPool1dConfig(Config):
    """Configuration of :class:`MaxPool1d` (Burn's fields: ``stride`` defaults to the
    kernel size).

    >>> MaxPool1dConfig(2).init()
    MaxPool1d {kernel_size: 2, stride: 2, padding: 'valid', dilation: 1, ceil_mode: False}
    """

    kernel_size: int
    stride: int | None = None
    padding: PaddingSpec = "valid"
    dilation: int = 1
    ceil_mode: bool = False

    def validate(self) -> None:
        as_tuple("MaxPool1dConfig", "kernel_size", self.kernel_size, 1)
        as_tuple("MaxPool1dConfig", "stride", self.kernel_size if self.stride is None else self.stride, 1)
        as_tuple("MaxPool1dConfig", "dilation", self.dilation, 1)
        check_padding("MaxPool1dConfig", self.padding, 1)

    def init(self, device: Any = None) -> MaxPool1d:
        """The layer (it has no parameters, so ``device`` is ignored)."""
        stride = self.kernel_size if self.stride is None else self.stride
        return MaxPool1d(self.kernel_size, stride, self.padding, self.dilation, self.ceil_mode)


class MaxPool1d(Module):
    """1-d max pooling (see :func:`ember.tensor.layer_ops.max_pool1d`)."""

    kernel_size: int
    stride: int | None = None
    padding: PaddingSpec = "valid"
    dilation: int = 1
    ceil_mode: bool = False

    def forward(self, x: Tensor) -> Tensor:
        return max_pool1d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)

    def forward_with_indices(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The pooled values and the int64 input position of each maximum."""
        return max_pool1d_with_indices(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)
