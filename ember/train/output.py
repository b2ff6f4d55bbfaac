"""What steps return: :class:`TrainOutput` (gradients and an item) and the items
metrics read (Burn's ``ClassificationOutput``, ``RegressionOutput``, ...)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ember.errors import GraphError
from ember.module import Module
from ember.optim import GradientsParams
from ember.tensor import Tensor

T = TypeVar("T")


@dataclass
class ClassificationOutput:
    """``loss`` (one value), ``output`` scores ``[batch, num_classes]`` (logits) and
    ``targets`` class indices ``[batch]``. Read by Loss, Accuracy, TopKAccuracy,
    Precision, Recall, FBetaScore and AUROC."""

    loss: Tensor
    output: Tensor
    targets: Tensor


@dataclass
class MultiLabelClassificationOutput:
    """``loss``, ``output`` scores ``[batch, num_labels]`` and 0/1 ``targets`` of the same shape."""

    loss: Tensor
    output: Tensor
    targets: Tensor


@dataclass
class RegressionOutput:
    """``loss``, ``output`` predictions and ``targets`` of the same shape."""

    loss: Tensor
    output: Tensor
    targets: Tensor


@dataclass
class TrainOutput(Generic[T]):
    """A training step's result: the parameters' gradients and the item metrics read.

    >>> def train_step(self, batch):  # doctest: +SKIP
    ...     item = self.forward_classification(batch)
    ...     return TrainOutput.new(self, item.loss.backward(), item)
    """

    grads: GradientsParams
    item: T

    @staticmethod
    def new(model: Module, grads: Any, item: T) -> TrainOutput[T]:
        """From ``loss.backward()``'s gradients (Burn's ``TrainOutput::new``): they are
        keyed by the model's parameter ids."""
        if isinstance(grads, GradientsParams):
            return TrainOutput(grads, item)
        if not isinstance(model, Module):
            raise GraphError(f"ember: TrainOutput.new: expected the model (a Module), got {type(model).__name__}")
        return TrainOutput(GradientsParams.from_grads(grads, model), item)
