"""The step protocols (Burn's ``TrainStep`` and ``InferenceStep``).

A model trained by the :class:`~ember.train.Learner` defines

- ``train_step(batch)``, run on the training (autodiff) model, returning a
  :class:`~ember.train.TrainOutput` ``(grads, item)``, or just an item with a
  ``loss`` field, which the learner then differentiates;
- ``valid_step(batch)``, run on ``model.valid()`` (the inner device, where
  Dropout and BatchNorm switch to inference), returning the item.

Instead of methods, pass functions ``train_step(model, batch)`` and
``valid_step(model, batch)`` to the :class:`~ember.train.Learner`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class TrainStep(Protocol):
    """``train_step(batch) -> TrainOutput | item with a loss``."""

    def train_step(self, batch: Any) -> Any: ...


@runtime_checkable
class ValidStep(Protocol):
    """``valid_step(batch) -> item``, on the model returned by ``valid()``."""

    def valid_step(self, batch: Any) -> Any: ...
