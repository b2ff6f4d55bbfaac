"""``ember.nn.functional``: the functional forms in one namespace, as
``torch.nn.functional`` (``import ember.nn.functional as F``).

Each name is defined once below ``ember.nn`` (activations in
``ember.tensor.activation``, layer math in ``ember.tensor.layer_ops``, resizing,
attention, unfolding and distances in their own modules); this module only gathers
them, plus ``pad`` and ``one_hot`` in PyTorch's function form.
"""

from __future__ import annotations

from typing import Any

from ember.nn.loss.binary_cross_entropy import binary_cross_entropy_with_logits
from ember.tensor.activation import (
    celu,
    elu,
    gelu,
    glu,
    hard_shrink,
    hard_sigmoid,
    hard_swish,
    hard_tanh,
    leaky_relu,
    log_sigmoid,
    log_softmax,
    mish,
    prelu,
    quick_gelu,
    relu,
    relu6,
    selu,
    sigmoid,
    silu,
    soft_shrink,
    softmax,
    softmin,
    softplus,
    softsign,
    tanh,
    tanhshrink,
    threshold,
    thresholded_relu,
)
from ember.tensor.attention import scaled_dot_product_attention
from ember.tensor.distance import cdist, cosine_similarity, normalize, pairwise_distance
from ember.tensor.grid_sample import affine_grid, grid_sample
from ember.tensor.interpolate import interpolate
from ember.tensor.layer_ops import (
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    avg_pool1d,
    avg_pool2d,
    conv1d,
    conv2d,
    conv3d,
    conv_transpose1d,
    conv_transpose2d,
    conv_transpose3d,
    dropout,
    embedding,
    linear,
    max_pool1d,
    max_pool1d_with_indices,
    max_pool2d,
    max_pool2d_with_indices,
)
from ember.tensor.loss import margin_ranking_loss, mse_loss
from ember.tensor.pool3d import avg_pool3d, max_pool3d, max_pool3d_with_indices
from ember.tensor.sampling import gumbel_softmax
from ember.tensor.tensor import Tensor
from ember.tensor.unfold import fold, unfold4d
from ember.tensor.unpool import max_unpool1d, max_unpool2d

unfold = unfold4d
hardtanh = hard_tanh
hardswish = hard_swish
hardshrink = hard_shrink
softshrink = soft_shrink
logsigmoid = log_sigmoid


def pad(x: Tensor, pad: Any, mode: str = "constant", value: Any = 0) -> Tensor:
    """``x.pad(pad, value, mode)`` in PyTorch's argument order."""
    return x.pad(pad, value, mode)


def pixel_shuffle(x: Tensor, upscale_factor: int) -> Tensor:
    return x.pixel_shuffle(upscale_factor)


def pixel_unshuffle(x: Tensor, downscale_factor: int) -> Tensor:
    return x.pixel_unshuffle(downscale_factor)


def one_hot(indices: Tensor, num_classes: int) -> Tensor:
    """``indices.one_hot(num_classes)`` (int64)."""
    return indices.one_hot(num_classes)


__all__ = [
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "affine_grid",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "binary_cross_entropy_with_logits",
    "cdist",
    "celu",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "cosine_similarity",
    "dropout",
    "elu",
    "embedding",
    "fold",
    "gelu",
    "grid_sample",
    "gumbel_softmax",
    "glu",
    "hard_shrink",
    "hard_sigmoid",
    "hard_swish",
    "hard_tanh",
    "hardshrink",
    "hardswish",
    "hardtanh",
    "interpolate",
    "leaky_relu",
    "linear",
    "log_sigmoid",
    "log_softmax",
    "logsigmoid",
    "max_pool1d",
    "margin_ranking_loss",
    "max_pool1d_with_indices",
    "max_pool2d",
    "max_pool2d_with_indices",
    "max_pool3d",
    "max_pool3d_with_indices",
    "max_unpool1d",
    "max_unpool2d",
    "mish",
    "pixel_shuffle",
    "pixel_unshuffle",
    "mse_loss",
    "normalize",
    "one_hot",
    "pad",
    "pairwise_distance",
    "prelu",
    "quick_gelu",
    "relu",
    "relu6",
    "scaled_dot_product_attention",
    "selu",
    "sigmoid",
    "silu",
    "soft_shrink",
    "softmax",
    "softmin",
    "softplus",
    "softshrink",
    "softsign",
    "tanh",
    "tanhshrink",
    "threshold",
    "thresholded_relu",
    "unfold",
    "unfold4d",
]
