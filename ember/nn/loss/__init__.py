"""Loss functions."""

from ember.nn.loss.binary_cross_entropy import BinaryCrossEntropyLoss, BinaryCrossEntropyLossConfig
from ember.nn.loss.cosine_embedding import CosineEmbeddingLoss, CosineEmbeddingLossConfig
from ember.nn.loss.cross_entropy import CrossEntropyLoss, CrossEntropyLossConfig
from ember.nn.loss.huber import HuberLoss, HuberLossConfig
from ember.nn.loss.kl_div import KLDivLoss, KLDivLossConfig
from ember.nn.loss.l1 import L1Loss
from ember.nn.loss.mse import MseLoss
from ember.nn.loss.nll import NllLoss, NllLossConfig
from ember.nn.loss.reduction import Reduction
from ember.nn.loss.smooth_l1 import SmoothL1Loss, SmoothL1LossConfig

__all__ = [
    "BinaryCrossEntropyLoss",
    "BinaryCrossEntropyLossConfig",
    "CosineEmbeddingLoss",
    "CosineEmbeddingLossConfig",
    "CrossEntropyLoss",
    "CrossEntropyLossConfig",
    "HuberLoss",
    "HuberLossConfig",
    "KLDivLoss",
    "KLDivLossConfig",
    "L1Loss",
    "MseLoss",
    "NllLoss",
    "NllLossConfig",
    "Reduction",
    "SmoothL1Loss",
    "SmoothL1LossConfig",
]
