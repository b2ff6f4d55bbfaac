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

With ``compile="auto"`` (the Learner's default) the steps compile on flex devices
(the CPU, where the compiled step is measured faster) and run eagerly elsewhere, and
each step's trace is audited for Python side effects (:mod:`ember.train.side_effects`):
a step that counts, prints, sleeps or reads a Python iterator runs eagerly from then
on, after one :class:`~ember.capture.CompileWarning` naming the effect. A step traced
while the optimizer has states (every step after the first, and the first step of a
resumed run) is compiled from its first call, so a resumed run computes each step as
the uninterrupted run did: the two are bit-identical. The very first update of a
run whose optimizer has no states yet (Adam's moments are made by its first step) runs
eagerly: a trace of it would serve that one call, since the next step's optimizer has
states and traces anew (on scikit-learn's digits a trace of about 0.1 s of CPU, thrown
away). ``stats()`` counts it as ``first``.

The model a compiled update returns is donated (see :func:`ember.compile`): the next
step updates its parameters in place. A step that cannot be held by a graph (it reads
a value, as a loss scaler's overflow check does) runs eagerly for that batch shape,
after one :class:`~ember.capture.CompileWarning` naming the cause.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from ember.capture import CompileWarning
from ember.capture import compile as ember_compile
from ember.capture.pytree import flatten
from ember.module import Module
from ember.tensor import Tensor
from ember.train.side_effects import audited

if TYPE_CHECKING:
    from ember.train.learner import Learner
    from ember.train.output import TrainOutput


class CompiledSteps:
    """The compiled training and validation steps of one :class:`Learner`."""

    def __init__(self, learner: Learner, max_traces: int = 8, auto: bool = False):
        self.learner = learner
        self.auto = auto
        traced = (
            (self._audited_update, self._audited_train, self._audited_valid)
            if auto
            else (
                self._update,
                self._train,
                self._valid,
            )
        )
        self.update, self.train, self.valid = (ember_compile(fn, max_traces=max_traces) for fn in traced)
        has_states = self._optimizer_has_states
        self.train.defer_first_plan = lambda: not has_states()
        # The update traces after its first call (eager when the optimizer has no
        # states yet, see _first_update): it compiles from its first call.
        self._updated = False  # whether update_step ran once
        self.update.defer_first_plan = lambda: not (self._updated or has_states())
        self.valid.defer_first_plan = False
        self._first: dict[str, tuple[int, ...]] = {}  # each step's first batch: its tensors' first dims
        self._ragged = {"update": 0, "train": 0, "valid": 0}
        self._first_eager = 0  # first updates run eagerly (0 or 1)
        #: ``"train"``/``"valid"`` -> why that step runs eagerly (``compile="auto"``).
        self.eager: dict[str, str] = {}
        self._device_checked: set[str] = set()  # the steps whose model's device was looked at

    def update_step(self, model: Module, batch: Any, lr: float) -> tuple[Module, Any]:
        """The training step and the update, compiled (eagerly for a ragged batch)."""
        if self._runs_eagerly("train", model) or self._is_ragged("update", batch) or self._first_update():
            return self._update(model, batch, lr)
        return self.update(model, batch, lr)

    def _first_update(self) -> bool:
        """Whether this update runs eagerly as the run's first, made while the
        optimizer has no states (see the module docstring)."""
        if self._updated:
            return False
        self._updated = True
        if self._optimizer_has_states():
            return False
        self._first_eager += 1
        return True

    def train_step(self, model: Module, batch: Any) -> TrainOutput:
        """The training step's gradients, compiled (eagerly for a ragged batch)."""
        if self._runs_eagerly("train", model) or self._is_ragged("train", batch):
            return self._train(model, batch)
        return self.train(model, batch)

    def valid_step(self, model: Module, batch: Any) -> Any:
        """The validation step, compiled (eagerly for a ragged batch)."""
        if self._runs_eagerly("valid", model) or self._is_ragged("valid", batch):
            return self._valid(model, batch)
        return self.valid(model, batch)

    def _optimizer_has_states(self) -> bool:
        states = getattr(self.learner.optim, "states", None)
        return bool(states)

    def _runs_eagerly(self, step: str, model: Module) -> bool:
        """Whether ``step`` runs eagerly: with ``compile="auto"``, on a device that is
        not flex's, or after its trace found side effects."""
        if not self.auto:
            return False
        if step not in self._device_checked:  # once: a run's model stays on its device
            self._device_checked.add(step)
            devices = model.devices()
            if devices and devices[0].backend_name != "flex":
                self.eager[step] = f"the model is on {devices[0]}, not a flex (CPU) device"
        return step in self.eager

    def _audit(self, step: str, fn: Any, *args: Any) -> Any:
        result, effects = audited(fn, *args)
        if effects and step not in self.eager:
            self.eager[step] = "; ".join(effects)
            name = "training" if step == "train" else "validation"
            warnings.warn(
                f"ember: Learner(compile='auto'): the {name} step runs eagerly from now on: it has Python side "
                f"effects that a compiled step would run only once, when traced: {self.eager[step]}. Pass "
                "compile=False to run eagerly without this warning, or compile=True to compile it anyway.",
                CompileWarning,
                stacklevel=2,
            )
        return result

    def _audited_update(self, model: Module, batch: Any, lr: float) -> tuple[Module, Any]:
        return self._audit("train", self._update, model, batch, lr)

    def _audited_train(self, model: Module, batch: Any) -> TrainOutput:
        return self._audit("train", self._train, model, batch)

    def _audited_valid(self, model: Module, batch: Any) -> Any:
        return self._audit("valid", self._valid, model, batch)

    def _is_ragged(self, step: str, batch: Any) -> bool:
        """Whether ``batch`` is a ragged batch of ``step`` (see the module docstring)."""
        if type(batch) is tuple and all(type(leaf) is Tensor for leaf in batch):  # (inputs, targets): no walk
            leaves: list[Any] = list(batch)
        else:
            leaves = []
            flatten(batch, leaves)
        shapes = [leaf._primitive.shape for leaf in leaves if isinstance(leaf, Tensor)]
        sizes = tuple(shape[0] if shape else 0 for shape in shapes)
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
        """Each compiled function's counters (traces, replays, eager runs...), its
        ragged batches and, for the update, its eager ``first`` step (both run eagerly,
        see the module docstring)."""
        stats = {
            name: {**getattr(self, name).stats, "ragged": self._ragged[name]} for name in ("update", "train", "valid")
        }
        stats["update"]["first"] = self._first_eager
        return stats
