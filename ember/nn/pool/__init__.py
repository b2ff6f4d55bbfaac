"""Pooling layers."""

from ember.nn.pool.adaptive_avg_pool1d import AdaptiveAvgPool1d, AdaptiveAvgPool1dConfig
from ember.nn.pool.adaptive_avg_pool2d import AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig
from ember.nn.pool.avg_pool1d import AvgPool1d, AvgPool1dConfig
from ember.nn.pool.avg_pool2d import AvgPool2d, AvgPool2dConfig
from ember.nn.pool.avg_pool3d import AvgPool3d, AvgPool3dConfig
from ember.nn.pool.max_pool1d import MaxPool1d, MaxPool1dConfig
from ember.nn.pool.max_pool2d import MaxPool2d, MaxPool2dConfig
from ember.nn.pool.max_pool3d import MaxPool3d, MaxPool3dConfig

__all__ = [
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool1dConfig",
    "AdaptiveAvgPool2d",
    "AdaptiveAvgPool2dConfig",
    "AvgPool1d",
    "AvgPool1dConfig",
    "AvgPool2d",
    "AvgPool2dConfig",
    "AvgPool3d",
    "AvgPool3dConfig",
    "MaxPool1d",
    "MaxPool1dConfig",
    "MaxPool2d",
    "MaxPool2dConfig",
    "MaxPool3d",
    "MaxPool3dConfig",
]
