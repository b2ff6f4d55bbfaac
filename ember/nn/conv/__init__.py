"""Convolution layers."""

from ember.nn.conv.conv1d import Conv1d, Conv1dConfig
from ember.nn.conv.conv2d import Conv2d, Conv2dConfig
from ember.nn.conv.conv_transpose1d import ConvTranspose1d, ConvTranspose1dConfig
from ember.nn.conv.conv_transpose2d import ConvTranspose2d, ConvTranspose2dConfig

__all__ = [
    "Conv1d",
    "Conv1dConfig",
    "Conv2d",
    "Conv2dConfig",
    "ConvTranspose1d",
    "ConvTranspose1dConfig",
    "ConvTranspose2d",
    "ConvTranspose2dConfig",
]
