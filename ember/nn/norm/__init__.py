"""Normalisation layers."""

from ember.nn.norm.batch_norm import BatchNorm, BatchNormConfig
from ember.nn.norm.group_norm import GroupNorm, GroupNormConfig
from ember.nn.norm.layer_norm import LayerNorm, LayerNormConfig
from ember.nn.norm.rms_norm import RmsNorm, RmsNormConfig

__all__ = [
    "BatchNorm",
    "BatchNormConfig",
    "GroupNorm",
    "GroupNormConfig",
    "LayerNorm",
    "LayerNormConfig",
    "RmsNorm",
    "RmsNormConfig",
]
