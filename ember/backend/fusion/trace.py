"""Capture: running a Python function once to record the graph of everything it
computes on a device (forward, the backward autodiff's rules emit, optimizer
updates), for ``ember.compile``.

While a :class:`Trace` is active, the device's backend is swapped for a
:class:`TraceBackend`, so every op on that device (from the function, the modules
it calls, autodiff, the optimizer) records a node instead of running. Values that
exist before the trace enter the graph as *inputs* when they were registered (the
function's tensor arguments, the model's parameters, state read through a
:class:`StateDict`) and as *constants* otherwise. Python numbers that change from
call to call (a learning-rate argument, an optimizer's step count) are
:class:`~ember.backend.fusion.scalars.SymScalar` s. Anything a graph cannot hold
(reading a value, branching on one) raises a
:class:`~ember.backend.fusion.scalars.GraphBreak`.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from ember.backend.fusion.backend import FailedValue, FusionBackend, LazyTensor
from ember.backend.fusion.graph import Graph, Ref, Sc
from ember.backend.fusion.scalars import GraphBreak, ScalarProgram, SymScalar


class _Local(threading.local):
    """Per-thread tracing state; the class default makes the common read (no trace)
    a plain attribute lookup instead of a failed one."""

    trace: Trace | None = None


_local = _Local()
_capture_lock = threading.RLock()


def current_trace() -> Trace | None:
    """The trace in progress on this thread, if any."""
    return _local.trace


class Trace:
    """One capture in progress: the graph, its inputs and the state it touched."""

    def __init__(self) -> None:
        self.graph = Graph()
        self.scalars = ScalarProgram()
        self.input_ids: dict[int, Ref] = {}  # id(real primitive) -> input ref
        self.const_ids: dict[int, Ref] = {}
        self.keep: list[Any] = []  # registered primitives stay alive (ids stay unique)
        self.input_sources: list[Any] = []  # per input: where a replay reads it
        self.sym_slots: dict[int, Sc] = {}  # SymScalar entry -> Sc placeholder
        self.scalar_wanted: list[int] = []  # scalar program entries, in Sc order
        self.state_reads: list[tuple[StateDict, Any, Any]] = []
        self.state_writes: dict[tuple[int, Any], tuple[StateDict, Any, Any]] = {}
        self.running_index: dict[int, tuple[int, int]] = {}  # id(RunningState) -> (argument, index)
        self.running_writes: dict[int, tuple[Any, Any]] = {}  # id(RunningState) -> (state, new value)
        self.draws: list[tuple[Any, int]] = []  # per random draw: (device generator, Philox blocks)
        self.backends: list[TraceBackend] = []

    # ------------------------------------------------------------------ inputs
    def add_input(self, primitive: Any, source: Any) -> Ref:
        """Registers a real primitive as an input of the graph (read from ``source``
        on each replay); a primitive registered twice is one input."""
        if type(primitive) is LazyTensor:  # a fusion device's tensor: its (ready) value
            primitive = _value_of(primitive)
        ref = self.input_ids.get(id(primitive))
        if ref is None:
            ref = self.graph.add_input(_aval(primitive))
            self.input_ids[id(primitive)] = ref
            self.keep.append(primitive)
            self.input_sources.append(source)
        return ref

    def scalar_input(self, value: Any, source: Any) -> SymScalar:
        """A run-time scalar input (read from ``source`` on each replay)."""
        sym = self.scalars.input(value)
        self.input_sources.append(("scalar", source))
        return sym

    def random_input(self, rng: Any, blocks: int, key: int, counter: int) -> tuple[SymScalar, SymScalar]:
        """A random draw's Philox key and counter as run-time scalars: each replay
        reserves ``blocks`` from ``rng`` (a ``DeviceGenerator``) where the eager function
        would, in program order. The trace gives its own reservation back, so tracing
        does not move the stream and the first run draws what an eager call would."""
        index = len(self.draws)
        self.draws.append((rng, blocks))
        rng.current().release(key, counter, blocks)
        return self.scalar_input(key, ("rng", index, 0)), self.scalar_input(counter, ("rng", index, 1))

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

    def scalar_slot(self, sym: SymScalar) -> Sc:
        if sym.program is not self.scalars:
            raise GraphBreak("ember: compile: a run-time scalar from another trace was used")
        slot = self.sym_slots.get(sym.index)
        if slot is None:
            slot = self.sym_slots[sym.index] = Sc(len(self.scalar_wanted))
            self.scalar_wanted.append(sym.index)
        return slot

    # ------------------------------------------------------------------ state
    def read_state(self, owner: StateDict, key: Any, value: Any) -> Any:
        """``owner[key]`` as the trace sees it: its tensors registered as inputs, its
        numbers as run-time scalars; the replay reads the entry again each call."""
        if value is None:
            self.state_reads.append((owner, key, None))
            return None
        fields, template = _state_fields(value)
        lifted = {}
        for name, item in fields.items():
            if _is_tensor(item):
                self.add_input(_innermost(item), ("state", owner, key, name))
                lifted[name] = item
            elif isinstance(item, (int, float)) and not isinstance(item, bool):
                lifted[name] = self.scalar_input(item, ("state", owner, key, name))
            else:
                lifted[name] = item
        self.state_reads.append((owner, key, template))
        return _rebuild_state(value, lifted)

    def write_state(self, owner: StateDict, key: Any, value: Any) -> None:
        self.state_writes[(id(owner), key)] = (owner, key, value)

    def write_running(self, state: Any, value: Any) -> None:
        """A running state (batch-norm statistics) updated inside the trace: the replay
        updates the same state of the module passed in that position."""
        if id(state) not in self.running_index:
            raise GraphBreak(
                "ember: compile: a running state (e.g. batch-norm statistics) of a module that is not an "
                "argument of the compiled function was updated; pass the module as an argument"
            )
        self.running_writes[id(state)] = (state, value)

    def running_value(self, state: Any) -> Any:
        """The value a running state has inside the trace (``None`` if not written)."""
        written = self.running_writes.get(id(state))
        return None if written is None else written[1]


class StateDict(dict):
    """A dict of per-key state (an optimizer's per-parameter states) that a trace
    can follow: reads become graph inputs, writes graph outputs, so a compiled step
    reads and updates the same states an eager step would."""

    __slots__ = ()

    def get(self, key: Any, default: Any = None) -> Any:
        trace = _local.trace
        if trace is None:
            return dict.get(self, key, default)
        written = trace.state_writes.get((id(self), key))
        if written is not None:  # written earlier in this trace
            return written[2]
        return trace.read_state(self, key, dict.get(self, key, default))

    def get_many(self, keys: Iterable[Any]) -> list[Any]:
        """``[self.get(key) for key in keys]`` (one C-level pass outside a trace)."""
        if _local.trace is None:
            return list(map(dict.get.__get__(self), keys))
        return [self.get(key) for key in keys]

    def __setitem__(self, key: Any, value: Any) -> None:
        trace = _local.trace
        if trace is None:
            dict.__setitem__(self, key, value)
        else:  # held by the trace; the replay writes the real values
            trace.write_state(self, key, value)

    def update(self, *args: Any, **kwargs: Any) -> None:
        trace = _local.trace
        if trace is None:  # an eager step: one C-level update
            dict.update(self, *args, **kwargs)
            return
        for key, value in dict(*args, **kwargs).items():
            trace.write_state(self, key, value)


# ---------------------------------------------------------------------- the backend
class TraceBackend(FusionBackend):
    """A :class:`FusionBackend` whose stream is a trace's graph and never runs: a sync
    point inside the traced function is a graph break. Ops from other threads than
    the tracing one run on the real backend (``real``), untouched by the trace.

    On a fusion device the tracer takes the place of the device's
    :class:`FusionBackend` and records for the backend under it (``inner``): a whole
    captured step is one fused graph of that backend. The fusion device's tensors
    (:class:`LazyTensor` s, ready ones: :func:`capture` runs the device's stream
    first) enter the trace by their values."""

    def __init__(self, inner: Any, trace: Trace, rng: Any = None, real: Any = None):
        super().__init__(inner)
        self.trace = trace
        self.rng = rng  # the traced device's generator
        self.real = inner if real is None else real  # what other threads call
        self.fusion: FusionBackend | None = real if isinstance(real, FusionBackend) else None
        self._stream.graph = trace.graph
        self.name = self.real.name
        self.thread = threading.get_ident()

    def _foreign(self) -> bool:
        return threading.get_ident() != self.thread

    def _ref(self, x: Any) -> Any:
        kind = type(x)
        if kind is LazyTensor:
            if x.value is None:
                return x.ref
            return self.trace.lift(_value_of(x))
        if kind is SymScalar:
            return self.trace.scalar_slot(x)
        if kind in (int, float, bool) or x is None or not (hasattr(x, "shape") and hasattr(x, "dtype")):
            return x
        return self.trace.lift(x)

    def _record(self, op: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        from ember.backend.fusion.avals import NotTraceable, infer

        if self._foreign():
            return getattr(self.real, op)(*args, **kwargs)
        try:
            result = infer(op, _concrete(args), _concrete(kwargs))
        except NotTraceable as error:
            raise GraphBreak(f"ember: compile: {op} cannot be captured: {error}") from None
        stream = self._stream
        kw = tuple(sorted((k, _map_args(v, self._ref)) for k, v in kwargs.items()))
        refs = stream.graph.add_node(op, _map_args(args, self._ref), kw, result)
        from ember.backend.fusion.graph import map_refs

        return map_refs(refs, lambda ref: self._handle(stream, ref))

    def flush(self) -> None:
        raise GraphBreak(
            "ember: compile: the function reads a tensor's value (to_data, into_scalar, a Python "
            "condition on a tensor) while it is traced; return the tensor instead and read it outside"
        )

    def _ready(self, x: Any) -> Any:
        if type(x) is LazyTensor and x.value is not None:
            return x.value
        self.flush()

    def from_numpy(self, array: Any) -> LazyTensor:
        if self._foreign():
            return self.real.from_numpy(array)
        value = self.inner.from_numpy(array)
        ref = self.trace.lift(value)
        aval = self.trace.graph.avals[ref]
        return LazyTensor(aval.shape, aval.dtype, None, ref)

    def random(self, shape, distribution, dtype, key, counter) -> LazyTensor:
        from ember.backend.philox import blocks_for

        if self._foreign():
            return self.real.random(shape, distribution, dtype, key, counter)
        blocks = blocks_for(math.prod(shape), dtype)
        sym_key, sym_counter = self.trace.random_input(self.rng, blocks, key, counter)
        return self._record("random", (tuple(shape), distribution, dtype, sym_key, sym_counter), {})

    def sync(self) -> None:
        if self._foreign():
            self.real.sync()

    def to_numpy(self, x: Any) -> Any:
        if self._foreign():
            return self.real.to_numpy(x)
        return super().to_numpy(x)

    def linalg(self, op: Any, inputs: tuple, options: tuple = ()) -> tuple:
        # A LAPACK call is a library-call node of the graph (a plan calls the wrapped
        # backend's linalg). lstsq's residuals are empty or not depending on the ranks it
        # finds; in a graph they take a fixed shape instead (``static_residuals``, the
        # squared residual norms whenever m > n, as JAX under jit).
        if self._foreign():
            return self.real.linalg(op, inputs, options)
        if op == "lstsq":
            options = (options[0] if options else None, True)
        return self._record("linalg", (op, inputs, options), {})

    def _eager(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self._foreign():
            return getattr(self.real, name)(*args, **kwargs)
        return super()._eager(name, *args, **kwargs)


def _map_args(args: Any, fn: Any) -> Any:
    kind = type(args)
    if kind is tuple:
        return tuple(_map_args(a, fn) for a in args)
    if kind is list:
        return [_map_args(a, fn) for a in args]
    if kind is dict:
        return {k: _map_args(v, fn) for k, v in args.items()}
    return fn(args)


def _concrete(args: Any) -> Any:
    """Arguments for shape inference: a SymScalar stands for a float."""
    kind = type(args)
    if kind is SymScalar:
        return args.value
    if kind is tuple:
        return tuple(_concrete(a) for a in args)
    if kind is list:
        return [_concrete(a) for a in args]
    if kind is dict:
        return {k: _concrete(v) for k, v in args.items()}
    return args


def _value_of(lazy: LazyTensor) -> Any:
    """The value of a ready :class:`LazyTensor` (its error, if its stream failed)."""
    value = lazy.value
    if type(value) is FailedValue:
        value.reraise()
    if value is None:  # pragma: no cover - capture runs the device's stream first
        raise GraphBreak("ember: compile: a tensor of the fusion device is pending in another stream")
    return value


def _aval(primitive: Any) -> Any:
    from ember.backend.fusion.graph import Aval

    return Aval(tuple(primitive.shape), primitive.dtype)


def _is_tensor(x: Any) -> bool:
    return hasattr(x, "_primitive") and hasattr(x, "_device")


def _innermost(tensor: Any) -> Any:
    """The primitive of the device that runs kernels, under any autodiff wrapper."""
    device = tensor._device
    p = tensor._primitive
    return device._backend.unwrap(p) if device.is_autodiff() else p


def _state_fields(value: Any) -> tuple[dict[str, Any], Any]:
    import dataclasses

    if dataclasses.is_dataclass(value):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    elif _is_tensor(value):
        fields = {"": value}
    else:
        raise GraphBreak(f"ember: compile: cannot follow a state of type {type(value).__name__}")
    template = (type(value), tuple((name, _field_kind(item)) for name, item in fields.items()))
    return fields, template


def _field_kind(item: Any) -> Any:
    if item is None:
        return "none"
    if _is_tensor(item):
        return ("tensor", tuple(item._primitive.shape), str(item._primitive.dtype), item._device)
    if isinstance(item, bool) or not isinstance(item, (int, float)):
        return ("static", item)
    return "number"


def _rebuild_state(value: Any, fields: dict[str, Any]) -> Any:
    if "" in fields:
        return fields[""]
    return type(value)(**fields)


# ---------------------------------------------------------------------- capture
def _refuse_generator_change(what: str) -> None:
    """A traced device's generator guard: seeds, states and forks cannot be replayed
    (random draws can: see :meth:`Trace.random_input`)."""
    if current_trace() is not None:  # other threads keep their generator API
        raise GraphBreak(
            f"ember: compile: a traced function must not call {what} on a traced device's generator "
            "(seed, rng_state, set_rng_state, fork_rng, or the first read of a lazy parameter); "
            "call it outside the compiled function"
        )


@contextmanager
def capture(devices: list[Any]) -> Iterator[Trace]:
    """Swaps each device's backend (and the wrapped backend of the autodiff devices
    over it, ``device.wrappers()``) for a :class:`TraceBackend` for the duration;
    yields the :class:`Trace`."""
    trace = Trace()
    swaps: list[tuple[Any, str, Any]] = []
    with _capture_lock:
        if _local.trace is not None:
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
            _local.trace = trace
            yield trace
        finally:
            _local.trace = None
            for owner, attr, real in reversed(swaps):
                setattr(owner, attr, real)
