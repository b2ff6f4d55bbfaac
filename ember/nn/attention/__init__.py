"""Attention: multi-head attention, its masks and its key/value cache."""

from ember.nn.attention.cache import KvCache, LayerCache
from ember.nn.attention.mask import GeneratePaddingMask, generate_autoregressive_mask, generate_padding_mask
from ember.nn.attention.mha import MhaInput, MhaOutput, MultiHeadAttention, MultiHeadAttentionConfig

__all__ = [
    "GeneratePaddingMask",
    "KvCache",
    "LayerCache",
    "MhaInput",
    "MhaOutput",
    "MultiHeadAttention",
    "MultiHeadAttentionConfig",
    "generate_autoregressive_mask",
    "generate_padding_mask",
]
