"""``Learner(..., compile=True)``: the learner's steps under :func:`ember.compile`.

Three compiled functions, each traced once per batch structure and shape:

- the whole training step, forward, backward and the optimizer's update (with the
  grad scaler's), ``(model, batch, lr) -> (model, item)``: what a single-device run
  without gradient accumulation calls;
- the gradients alone, ``(model, batch) -> TrainOutput``: gradient accumulation and
  data-parallel runs (their gradients are summed or averaged over ranks eagerly);
- the validation step, ``(model, batch) -> item``.

A *ragged* batch, one whose tensors are all no longer along their first dim than
those of the first batch the step saw and shorter in one (a loader's last, smaller
batch), runs the step eagerly: a plan of its own would be compiled for one call per
epoch (on scikit-learn's digits, ``examples/classify_digits.py``, 0.9 s of CPU for the
training step's and 0.2 s for the validation step's, against about 15 ms for the
batch run eagerly). Which batches run eagerly depends only on the batches' shapes, so
two runs stay bit-identical; their losses differ from a compiled step's only as much
as eager and compiled steps do (float reassociation, 1e-5 relative at most in the
tests). ``stats()`` counts them as ``ragged``.

The model a compiled update returns is donated (see :func:`ember.compile`): the next
step updates its parameters in place. A step that cannot be held by a graph (it reads
a value, as a loss scaler's overflow check does) runs eagerly for that batch shape,
after one :class:`~ember.capture.CompileWarning` naming the cause.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.capture import compile as ember_compile
from ember.capture.pytree import flatten
from ember.module import Module
from ember.tensor import Tensor

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
        self._first: dict[str, tuple[int, ...]] = {}  # each step's first batch: its tensors' first dims
        self._ragged = {"update": 0, "train": 0, "valid": 0}

    def update_step(self, model: Module, batch: Any, lr: float) -> tuple[Module, Any]:
        """The training step and the update, compiled (eagerly for a ragged batch)."""
        if self._is_ragged("update", batch):
            return self._update(model, batch, lr)
        return self.update(model, batch, lr)

    def train_step(self, model: Module, batch: Any) -> TrainOutput:
        """The training step's gradients, compiled (eagerly for a ragged batch)."""
        if self._is_ragged("train", batch):
            return self._train(model, batch)
        return self.train(model, batch)

    def valid_step(self, model: Module, batch: Any) -> Any:
        """The validation step, compiled (eagerly for a ragged batch)."""
        if self._is_ragged("valid", batch):
            return self._valid(model, batch)
        return self.valid(model, batch)

    def _is_ragged(self, step: str, batch: Any) -> bool:
        """Whether ``batch`` is a ragged batch of ``step`` (see the module docstring)."""
        leaves: list[Any] = []
        flatten(batch, leaves)
        sizes = tuple(leaf.dims()[0] if leaf.dims() else 0 for leaf in leaves if isinstance(leaf, Tensor))
        first = self._first.setdefault(step, sizes)
        ragged = sizes != first and len(sizes) == len(first) and all(size <= full for size, full in zip(sizes, first))
        if ragged:
            self._ragged[step] += 1
        return ragged

    def _update(self, model: Module, batch: Any, lr: float) -> tuple[Module, Any]:
        out = self.learner.eager_train_step(model, batch)
        return self.learner.optimizer_step(lr, model, out.grads), out.item

    def _train(self, model: Module, batch: Any) -> TrainOutput:
        return self.learner.eager_train_step(model, batch)

    def _valid(self, model: Module, batch: Any) -> Any:
        return self.learner.eager_valid_step(model, batch)

    def stats(self) -> dict[str, dict[str, int]]:
        """Each compiled function's counters (traces, replays, eager runs...) and its
        ragged batches (run eagerly, see the module docstring)."""
        return {
            name: {**getattr(self, name).stats, "ragged": self._ragged[name]} for name in ("update", "train", "valid")
        }
