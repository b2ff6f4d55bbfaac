"""Volumetric pooling, ``max_pool3d`` and ``avg_pool3d`` (``torch.nn.functional``'s),
over the same module ops as the 1-D and 2-D forms (``ember.tensor.layer_ops``)."""

from __future__ import annotations

from ember.tensor.layer_ops import IntOrTuple, Padding, _avg_pool, _max_pool
from ember.tensor.tensor import Tensor


def max_pool3d(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: Padding = 0,
    dilation: IntOrTuple = 1,
    ceil_mode: bool = False,
) -> Tensor:
    """The maximum over windows of ``x`` ``[batch, channels, depth, height, width]``."""
    return _max_pool("max_pool3d", 3, x, kernel_size, stride, padding, dilation, ceil_mode, False)


def max_pool3d_with_indices(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: Padding = 0,
    dilation: IntOrTuple = 1,
    ceil_mode: bool = False,
) -> tuple[Tensor, Tensor]:
    """:func:`max_pool3d` and the int64 flat position (``(d * height + h) * width + w``) of each maximum."""
    return _max_pool("max_pool3d", 3, x, kernel_size, stride, padding, dilation, ceil_mode, True)


def avg_pool3d(
    x: Tensor,
    kernel_size: IntOrTuple,
    stride: IntOrTuple | None = None,
    padding: Padding = 0,
    count_include_pad: bool = True,
    ceil_mode: bool = False,
) -> Tensor:
    """The mean over windows of ``x`` ``[batch, channels, depth, height, width]``."""
    return _avg_pool("avg_pool3d", 3, x, kernel_size, stride, padding, count_include_pad, ceil_mode)
