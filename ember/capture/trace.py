"""Capture: running a Python function once to record the graph of everything it
computes on a device (forward, the backward autodiff's rules emit, optimizer
updates), for ``ember.compile``.

While a :class:`Trace` is active, the device's backend is swapped for a
:class:`~ember.capture.tracer.TraceBackend`, so every op on that device (from the
function, the modules it calls, autodiff, the optimizer) records a node instead of
running. Values that exist before the trace enter the graph as *inputs* when they were
registered with their :class:`~ember.capture.sources.Source` (the function's tensor
arguments, the model's parameters, state read through a
:class:`~ember.tensor.capture_hook.StateDict`) and as *constants* otherwise. Python
numbers that change from call to call (a learning-rate argument, an optimizer's step
count) are :class:`~ember.backend.fusion.scalars.SymScalar` s. Anything a graph cannot
hold (reading a value, branching on one) raises a
:class:`~ember.backend.fusion.scalars.GraphBreak`.

The trace is the :class:`~ember.tensor.capture_hook.CaptureHook` of its thread: what
modules and optimizers call (see that module) reaches it there.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ember.backend.fusion.backend import FusionBackend, LazyTensor
from ember.backend.fusion.graph import Aval, Graph, Ref, Sc
from ember.backend.fusion.scalars import GraphBreak, ScalarProgram, SymScalar
from ember.capture.leaves import innermost
from ember.capture.sources import RandomDraw, Running, Source, StateField, StateNumber, StateRead
from ember.capture.tracer import TraceBackend, value_of
from ember.tensor import Tensor, capture_hook
from ember.tensor.capture_hook import StateDict

_capture_lock = threading.RLock()


class Trace:
    """One capture in progress: the graph, its inputs and the state it touched."""

    def __init__(self) -> None:
        self.graph = Graph()
        self.scalars = ScalarProgram()
        self.input_ids: dict[int, Ref] = {}  # id(real primitive) -> input ref
        self.const_ids: dict[int, Ref] = {}
        self.keep: list[Any] = []  # registered primitives stay alive (ids stay unique)
        self.sources: list[Source] = []  # per input (tensor or scalar): where a replay reads it
        self.sym_slots: dict[int, Sc] = {}  # SymScalar entry -> Sc placeholder
        self.scalar_wanted: list[int] = []  # scalar program entries, in Sc order
        self.state_reads: list[StateRead] = []
        self.state_writes: dict[tuple[int, Any], tuple[StateDict, Any, Any]] = {}
        self.running_sources: dict[int, Running] = {}  # id(RunningState) -> where it was read
        self.running_writes: dict[int, tuple[Any, Any]] = {}  # id(RunningState) -> (state, new value)
        self.draws: list[tuple[Any, int]] = []  # per random draw: (device generator, Philox blocks)
        self.backends: list[TraceBackend] = []

    # ------------------------------------------------------------------ inputs
    def add_input(self, primitive: Any, source: Source) -> Ref:
        """Registers a real primitive as an input of the graph (read from ``source``
        on each replay); a primitive registered twice is one input."""
        if type(primitive) is LazyTensor:  # a fusion device's tensor: its (ready) value
            primitive = value_of(primitive)
        ref = self.input_ids.get(id(primitive))
        if ref is None:
            ref = self.graph.add_input(Aval(tuple(primitive.shape), primitive.dtype))
            self.input_ids[id(primitive)] = ref
            self.keep.append(primitive)
            self.sources.append(source)
        return ref

    def scalar_input(self, value: Any, source: Source) -> SymScalar:
        """A run-time scalar input (read from ``source`` on each replay)."""
        sym = self.scalars.input(value)
        self.sources.append(source)
        return sym

    def add_running(self, state: Any, source: Running) -> None:
        """Registers a running state of a module argument (its value an input read from
        ``source``); the trace may update it (:meth:`write_running`)."""
        self.add_input(innermost(state.value()), source)
        self.running_sources[id(state)] = source

    def random_input(self, rng: Any, blocks: int, key: int, counter: int) -> tuple[SymScalar, SymScalar]:
        """A random draw's Philox key and counter as run-time scalars: each replay
        reserves ``blocks`` from ``rng`` (a ``DeviceGenerator``) where the eager function
        would, in program order. The trace gives its own reservation back, so tracing
        does not move the stream and the first run draws what an eager call would."""
        index = len(self.draws)
        self.draws.append((rng, blocks))
        rng.current().release(key, counter, blocks)
        return self.scalar_input(key, RandomDraw(index, 0)), self.scalar_input(counter, RandomDraw(index, 1))

    def lift(self, primitive: Any) -> Ref:
        """The graph value of a real primitive met while tracing: its input, or a constant."""
        ref = self.input_ids.get(id(primitive))
        if ref is not None:
            return ref
        ref = self.const_ids.get(id(primitive))
        if ref is None:
            ref = self.graph.add_const(primitive)
            self.const_ids[id(primitive)] = ref
            self.keep.append(primitive)
        return ref

    def output_ref(self, primitive: Any) -> int:
        """The graph value an output holds: a pending tensor's node, or a real primitive
        (an input or a constant: the function returned it unchanged)."""
        if type(primitive) is LazyTensor:
            if primitive.value is None:
                ref = primitive.ref
                assert ref is not None, "a LazyTensor without a value is pending in a stream"
                return ref
            primitive = primitive.value
        return self.lift(primitive)

    def scalar_slot(self, sym: SymScalar) -> Sc:
        if sym.program is not self.scalars:
            raise GraphBreak("ember: compile: a run-time scalar from another trace was used")
        slot = self.sym_slots.get(sym.index)
        if slot is None:
            slot = self.sym_slots[sym.index] = Sc(len(self.scalar_wanted))
            self.scalar_wanted.append(sym.index)
        return slot

    # ------------------------------------------------------------------ the capture hook
    def read_state(self, owner: StateDict, key: Any, value: Any) -> Any:
        """``owner[key]`` as the trace sees it: its tensors registered as inputs, its
        numbers as run-time scalars; the replay reads the entry again each call."""
        if value is None:
            self.state_reads.append(StateRead(owner, key, None))
            return None
        fields, template = state_fields(value)
        lifted: dict[str, Any] = {}
        for name, item in fields.items():
            if isinstance(item, Tensor):
                self.add_input(innermost(item), StateField(owner, key, name))
                lifted[name] = item
            elif isinstance(item, (int, float)) and not isinstance(item, bool):
                lifted[name] = self.scalar_input(item, StateNumber(owner, key, name))
            else:
                lifted[name] = item
        self.state_reads.append(StateRead(owner, key, template))
        if "" in lifted:
            return lifted[""]
        return type(value)(**lifted)

    def write_state(self, owner: StateDict, key: Any, value: Any) -> None:
        self.state_writes[(id(owner), key)] = (owner, key, value)

    def state_written(self, owner: StateDict, key: Any) -> Any:
        written = self.state_writes.get((id(owner), key))
        return None if written is None else written[2]

    def write_running(self, state: Any, value: Any) -> None:
        """A running state (batch-norm statistics) updated inside the trace: the replay
        updates the same state of the module passed in that position."""
        if id(state) not in self.running_sources:
            raise GraphBreak(
                "ember: compile: a running state (e.g. batch-norm statistics) of a module that is not an "
                "argument of the compiled function was updated; pass the module as an argument"
            )
        self.running_writes[id(state)] = (state, value)

    def running_value(self, state: Any) -> Any:
        """The value a running state has inside the trace (``None`` if not written)."""
        written = self.running_writes.get(id(state))
        return None if written is None else written[1]


# ---------------------------------------------------------------------- state values
def state_fields(value: Any) -> tuple[dict[str, Any], Any]:
    """A state's fields (a dataclass's, or ``{"": tensor}``) and its *template*: its
    class and each field's kind (a tensor's shape, dtype and device; "number"; a static
    value), which a replay checks before it reads the state."""
    if dataclasses.is_dataclass(value):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    elif isinstance(value, Tensor):
        fields = {"": value}
    else:
        raise GraphBreak(f"ember: compile: cannot follow a state of type {type(value).__name__}")
    template = (type(value), tuple((name, _field_kind(item)) for name, item in fields.items()))
    return fields, template


def state_template(value: Any) -> Any:
    """The template of a state (``None`` for no state)."""
    return None if value is None else state_fields(value)[1]


def _field_kind(item: Any) -> Any:
    if item is None:
        return "none"
    if isinstance(item, Tensor):
        return ("tensor", tuple(item._primitive.shape), str(item._primitive.dtype), item._device)
    if isinstance(item, bool) or not isinstance(item, (int, float)):
        return ("static", item)
    return "number"


# ---------------------------------------------------------------------- capture
def _refuse_generator_change(what: str) -> None:
    """A traced device's generator guard: seeds, states and forks cannot be replayed
    (random draws can: see :meth:`Trace.random_input`)."""
    if capture_hook.capturing():  # other threads keep their generator API
        raise GraphBreak(
            f"ember: compile: a traced function must not call {what} on a traced device's generator "
            "(seed, rng_state, set_rng_state, fork_rng, or the first read of a lazy parameter); "
            "call it outside the compiled function"
        )


@contextmanager
def capture(devices: list[Any]) -> Iterator[Trace]:
    """Swaps each device's backend (and the wrapped backend of the autodiff devices
    over it, ``device.wrappers()``) for a :class:`TraceBackend` for the duration;
    yields the :class:`Trace`, which is the thread's capture hook meanwhile."""
    trace = Trace()
    swaps: list[tuple[Any, str, Any]] = []
    with _capture_lock:
        if capture_hook.capturing():
            raise GraphBreak("ember: compile: a compiled function called another while tracing")
        try:
            for device in devices:
                real = device._backend
                if isinstance(real, FusionBackend) and not isinstance(real, TraceBackend):
                    # A fusion device: its queued ops run now (their results are the
                    # trace's inputs), and the trace records for the backend it wraps.
                    real.flush()
                    tracer = TraceBackend(real.inner, trace, device._rng, real)
                else:
                    tracer = TraceBackend(real, trace, device._rng)
                swaps.append((device._rng, "guard", device._rng.guard))
                device._rng.guard = _refuse_generator_change
                trace.backends.append(tracer)
                swaps.append((device, "_backend", real))
                device._backend = tracer
                for other in device.wrappers():
                    if other._inner is device:
                        swaps.append((other._backend, "inner", other._backend.inner))
                        other._backend.inner = tracer
            with capture_hook.active(trace):
                yield trace
        finally:
            for owner, attr, real in reversed(swaps):
                setattr(owner, attr, real)
