"""Loss functions."""

from ember.nn.loss.mse import MseLoss
from ember.nn.loss.reduction import Reduction

__all__ = ["MseLoss", "Reduction"]
