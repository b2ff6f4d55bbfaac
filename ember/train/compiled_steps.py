"""``Learner(..., compile=True)``: the learner's steps under :func:`ember.compile`.

Three compiled functions, each traced once per batch structure and shape (a last,
smaller batch traces once more):

- the whole training step, forward, backward and the optimizer's update (with the
  grad scaler's), ``(model, batch, lr) -> (model, item)``: what a single-device run
  without gradient accumulation calls;
- the gradients alone, ``(model, batch) -> TrainOutput``: gradient accumulation and
  data-parallel runs (their gradients are summed or averaged over ranks eagerly);
- the validation step, ``(model, batch) -> item``.

The model a compiled update returns is donated (see :func:`ember.compile`): the next
step updates its parameters in place. A step that cannot be held by a graph (it reads
a value, as a loss scaler's overflow check does) runs eagerly for that batch shape,
after one :class:`~ember.capture.CompileWarning` naming the cause.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.capture import compile as ember_compile
from ember.module import Module

if TYPE_CHECKING:
    from ember.train.learner import Learner
    from ember.train.output import TrainOutput


class CompiledSteps:
    """The compiled training and validation steps of one :class:`Learner`."""

    def __init__(self, learner: Learner, max_traces: int = 8):
        self.learner = learner
        self.update = ember_compile(self._update, max_traces=max_traces)
        self.train = ember_compile(self._train, max_traces=max_traces)
        self.valid = ember_compile(self._valid, max_traces=max_traces)

    def _update(self, model: Module, batch: Any, lr: float) -> tuple[Module, Any]:
        out = self.learner.eager_train_step(model, batch)
        return self.learner.optimizer_step(lr, model, out.grads), out.item

    def _train(self, model: Module, batch: Any) -> TrainOutput:
        return self.learner.eager_train_step(model, batch)

    def _valid(self, model: Module, batch: Any) -> Any:
        return self.learner.eager_valid_step(model, batch)

    def stats(self) -> dict[str, dict[str, int]]:
        """Each compiled function's counters (traces, replays, eager runs...)."""
        return {name: dict(getattr(self, name).stats) for name in ("update", "train", "valid")}
