"""Where each output of a captured graph goes: the compiled function's results, the
optimizer states it wrote, the running states it updated.

Outputs are numbered in the graph's order: the results' tensors and modules' values
first, then the state writes' tensors, then the running states. Each typed write knows
its outputs and how a generic replay stores them (:meth:`StateWrite.apply`,
:meth:`RunningWrite.apply`); the generated runner (:mod:`ember.capture.runner`) writes
the same stores as straight-line code. A write names the place it stores (as
:meth:`ember.capture.sources.Source.place` names what an input reads): equal places
pair an output with the input it may be computed into.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ember.capture.leaves import tensor_on
from ember.capture.sources import Modules, Running
from ember.device import Device
from ember.module import Module
from ember.tensor import Tensor

if TYPE_CHECKING:
    from ember.tensor.capture_hook import StateDict


# ---------------------------------------------------------------------- results
@dataclass(frozen=True, slots=True)
class TensorResult:
    """A tensor of the result: output ``output``, a tensor of ``device``."""

    output: int
    device: Device


@dataclass(frozen=True, slots=True)
class ModuleResult:
    """A module of the result: its parameters' then running states' values are outputs
    ``first``, ``first + 1``, ...; ``traced`` is the module the trace returned."""

    first: int
    traced: Module


@dataclass(frozen=True, slots=True)
class ScalarResult:
    """A run-time scalar of the result: scalar slot ``slot``, returned as ``kind``."""

    slot: int
    kind: type


@dataclass(frozen=True, slots=True)
class ValueResult:
    """Anything else in the result: the value the trace returned, returned as it is."""

    value: Any


Result = TensorResult | ModuleResult | ScalarResult | ValueResult


# ---------------------------------------------------------------------- optimizer states
@dataclass(frozen=True, slots=True)
class TensorField:
    """A field of a written state holding output ``output`` (a tensor of ``device``)."""

    name: str
    output: int
    device: Device


@dataclass(frozen=True, slots=True)
class NumberField:
    """A field of a written state holding scalar slot ``slot`` (a Python ``kind``)."""

    name: str
    slot: int
    kind: type


@dataclass(frozen=True, slots=True)
class StaticField:
    """A field of a written state holding the same value on every call."""

    name: str
    value: Any


Field = TensorField | NumberField | StaticField


@dataclass(frozen=True, slots=True, eq=False)
class StateWrite:
    """``owner[key] = cls(**fields)`` (``owner[key] = tensor`` where ``cls`` is
    :class:`Tensor`, its one field named ``""``): a state the traced function wrote."""

    owner: StateDict
    key: Any
    cls: type
    fields: tuple[Field, ...]

    def place(self, field: TensorField) -> Any:
        return ("state", id(self.owner), self.key, field.name)

    def apply(self, values: list[Any], scalars: list[Any], wrap: Callable[[Any], Any] | None) -> None:
        """Stores the state from a run's outputs ``values`` and ``scalars``: into the
        state object there when it has this write's class (its fields assigned), else
        as a new one."""
        new: dict[str, Any] = {}
        for field in self.fields:
            if type(field) is TensorField:
                new[field.name] = tensor_on(values[field.output], field.device, wrap)
            elif type(field) is NumberField:
                new[field.name] = field.kind(scalars[field.slot])
            else:
                assert isinstance(field, StaticField)
                new[field.name] = field.value
        current = dict.get(self.owner, self.key)
        cls = self.cls
        if type(current) is cls and cls is not Tensor and hasattr(current, "__dataclass_fields__"):
            for name, item in new.items():
                setattr(current, name, item)
        else:
            dict.__setitem__(self.owner, self.key, new[""] if cls is Tensor else cls(**new))


# ---------------------------------------------------------------------- running states
@dataclass(frozen=True, slots=True)
class RunningWrite:
    """A running state updated by the traced function: ``source`` (the running state
    it read) takes output ``output``, a tensor of ``device``."""

    source: Running
    output: int
    device: Device

    def place(self) -> Any:
        return ("running", self.source.module, self.source.index)

    def apply(self, leaves: list[Any], modules: Modules, values: list[Any], wrap: Callable[[Any], Any] | None) -> None:
        self.source.write(leaves, modules, tensor_on(values[self.output], self.device, wrap))
