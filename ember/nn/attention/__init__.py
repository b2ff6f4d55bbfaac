"""Attention: multi-head attention and its masks."""

from ember.nn.attention.mask import GeneratePaddingMask, generate_autoregressive_mask, generate_padding_mask
from ember.nn.attention.mha import MhaInput, MhaOutput, MultiHeadAttention, MultiHeadAttentionConfig

__all__ = [
    "GeneratePaddingMask",
    "MhaInput",
    "MhaOutput",
    "MultiHeadAttention",
    "MultiHeadAttentionConfig",
    "generate_autoregressive_mask",
    "generate_padding_mask",
]
