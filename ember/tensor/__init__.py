"""``ember.tensor``: the user's tensor, its data, shapes, dtypes and activations."""

from ember.backend.distribution import Distribution
from ember.backend.dtype import DType
from ember.tensor.data import TensorData
from ember.tensor.shape import Shape
from ember.tensor.tensor import Tensor

__all__ = ["DType", "Distribution", "Shape", "Tensor", "TensorData"]
