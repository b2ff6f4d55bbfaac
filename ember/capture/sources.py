"""Where each input of a captured graph comes from: typed sources.

A trace registers every value that exists before it (a tensor argument, a module's
parameter or running state, an optimizer state's tensor or number, a float argument, a
random draw's Philox key and counter) as an input of the graph, with its :class:`Source`.
Each replay reads every input again from its source, in the generic path with
:meth:`Source.read` and in the generated steady-state runner with the expression
:meth:`Source.code` writes (:mod:`ember.capture.runner`). A source also names the
place it reads (:meth:`Source.place`): an output written back to the same place (the
returned module's parameter of the same id, the same state field) may be computed into
the input's array (a donation, see :mod:`ember.capture.writes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ember.capture.leaves import innermost, module_leaves
from ember.tensor import Tensor

if TYPE_CHECKING:
    from ember.capture.runner import RunnerCode
    from ember.tensor.capture_hook import StateDict

#: What a read answers when the value is not where the trace found it (a state that was
#: removed, a field that is no longer a tensor): the call traces again.
RETRACE: Any = object()

#: Per run, module argument position -> its (parameters, running states).
Modules = dict[int, tuple[list[Any], list[Any]]]


def _leaves_of(modules: Modules, leaves: list[Any], position: int) -> tuple[list[Any], list[Any]]:
    found = modules.get(position)
    if found is None:
        found = modules[position] = module_leaves(leaves[position])
    return found


class Source:
    """Where one input of a captured graph is read on each replay."""

    __slots__ = ()

    #: A run-time scalar (a Python number read per call) rather than a tensor.
    scalar: ClassVar[bool] = False

    def read(self, leaves: list[Any], modules: Modules) -> Any:
        """The input's value for a call with the flattened arguments ``leaves`` (a
        primitive of the device's innermost backend, or a number), or :data:`RETRACE`."""
        raise NotImplementedError

    def code(self, gen: RunnerCode) -> str:
        """The same read as a Python expression of the generated runner, which has
        checked that the call has the structure the trace saw."""
        raise NotImplementedError

    def place(self, leaves: list[Any], modules: Modules) -> Any:
        """A hashable name of the place this source reads (``None`` if nothing writes
        it back): an output written to the same place may replace the input."""
        return None


# ---------------------------------------------------------------------- tensors
@dataclass(frozen=True, slots=True)
class Argument(Source):
    """A tensor argument of the compiled function (at ``position`` of its leaves)."""

    position: int

    def read(self, leaves: list[Any], modules: Modules) -> Any:
        return innermost(leaves[self.position])

    def code(self, gen: RunnerCode) -> str:
        inner = ".inner" if gen.leaves[self.position]._device.is_autodiff() else ""
        return f"leaves[{self.position}]._primitive{inner}"


@dataclass(frozen=True, slots=True)
class Parameter(Source):
    """Parameter ``index`` (in visit order) of the module argument at ``module``."""

    module: int
    index: int

    def read(self, leaves: list[Any], modules: Modules) -> Any:
        return innermost(_leaves_of(modules, leaves, self.module)[0][self.index].val())

    def code(self, gen: RunnerCode) -> str:
        if gen.returns_model:  # the returned module's tensor, updated in place
            return gen.slot(self.index)
        return f"{gen.module_params(self.module)}[{self.index}]._value._primitive"

    def place(self, leaves: list[Any], modules: Modules) -> Any:
        return ("param", _leaves_of(modules, leaves, self.module)[0][self.index].id)


@dataclass(frozen=True, slots=True)
class Running(Source):
    """Running state ``index`` (batch-norm statistics) of the module argument at ``module``."""

    module: int
    index: int

    def read(self, leaves: list[Any], modules: Modules) -> Any:
        return innermost(_leaves_of(modules, leaves, self.module)[1][self.index].value())

    def code(self, gen: RunnerCode) -> str:
        return gen.slot(gen.n_params + self.index)

    def place(self, leaves: list[Any], modules: Modules) -> Any:
        return ("running", self.module, self.index)

    def write(self, leaves: list[Any], modules: Modules, value: Tensor) -> None:
        """Stores the running state's new value (what the traced function's update
        would have stored)."""
        _leaves_of(modules, leaves, self.module)[1][self.index]._value = value


@dataclass(frozen=True, slots=True, eq=False)
class StateField(Source):
    """A tensor of an optimizer state: ``owner[key]`` itself (``field == ""``) or
    its field ``field``."""

    owner: StateDict
    key: Any
    field: str

    def read(self, leaves: list[Any], modules: Modules) -> Any:
        state = dict.get(self.owner, self.key)
        if state is None:
            return RETRACE
        item = state if self.field == "" else getattr(state, self.field, None)
        return innermost(item) if isinstance(item, Tensor) else RETRACE

    def code(self, gen: RunnerCode) -> str:
        var = gen.state_var(self.owner, self.key)
        return f"{var}._primitive" if self.field == "" else f"{var}.{self.field}._primitive"

    def place(self, leaves: list[Any], modules: Modules) -> Any:
        return ("state", id(self.owner), self.key, self.field)


@dataclass(frozen=True, slots=True, eq=False)
class StateRead:
    """A whole optimizer state the trace read (``owner[key]``), with its *template*
    (its class and each field's kind, ``None`` for no state): a replay reads its fields
    through :class:`StateField` and :class:`StateNumber` only after checking that the
    state there still has this template."""

    owner: StateDict
    key: Any
    template: Any

    def current(self) -> Any:
        """The state there now (``None`` if none)."""
        return dict.get(self.owner, self.key)


# ---------------------------------------------------------------------- run-time scalars
@dataclass(frozen=True, slots=True)
class ScalarArgument(Source):
    """A float argument of the compiled function (at ``position`` of its leaves)."""

    position: int
    scalar: ClassVar[bool] = True

    def read(self, leaves: list[Any], modules: Modules) -> Any:
        return leaves[self.position]

    def code(self, gen: RunnerCode) -> str:
        return f"leaves[{self.position}]"


@dataclass(frozen=True, slots=True, eq=False)
class StateNumber(Source):
    """A number field of an optimizer state (a step count)."""

    owner: StateDict
    key: Any
    field: str
    scalar: ClassVar[bool] = True

    def read(self, leaves: list[Any], modules: Modules) -> Any:
        state = dict.get(self.owner, self.key)
        return RETRACE if state is None else getattr(state, self.field)

    def code(self, gen: RunnerCode) -> str:
        return f"{gen.state_var(self.owner, self.key)}.{self.field}"


@dataclass(frozen=True, slots=True)
class RandomDraw(Source):
    """The Philox key (``part`` 0) or counter (``part`` 1) of random draw ``draw``:
    each call reserves its blocks from the device's generator, in program order, once
    the guards have passed (see :meth:`ember.capture.trace.Trace.random_input`)."""

    draw: int
    part: int
    scalar: ClassVar[bool] = True

    def read(self, leaves: list[Any], modules: Modules) -> Any:
        return self  # filled in by the run from its reservation

    def code(self, gen: RunnerCode) -> str:
        return f"drawn[{self.draw}][{self.part}]"

    def reserved(self, drawn: list[tuple[int, int]]) -> int:
        """This source's number in a run's reservations (``Entry.reserve``)."""
        return drawn[self.draw][self.part]
