"""The backend a device has while it is traced: every op records a node of the
trace's graph instead of running (see :mod:`ember.capture.trace`)."""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING, Any

from ember.backend.fusion.backend import FailedValue, FusionBackend, LazyTensor
from ember.backend.fusion.scalars import GraphBreak, SymScalar

if TYPE_CHECKING:
    from ember.capture.trace import Trace


class TraceBackend(FusionBackend):
    """A :class:`FusionBackend` whose stream is a trace's graph and never runs: a sync
    point inside the traced function is a graph break. Ops from other threads than
    the tracing one run on the real backend (``real``), untouched by the trace.

    On a fusion device the tracer takes the place of the device's
    :class:`FusionBackend` and records for the backend under it (``inner``): a whole
    captured step is one fused graph of that backend. The fusion device's tensors
    (:class:`LazyTensor` s, ready ones: :func:`capture` runs the device's stream
    first) enter the trace by their values."""

    _inline = False  # every call goes through this class's _record

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
            return self.trace.lift(value_of(x))
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
        # Reading a value inside the trace is a graph break, a ready tensor's too (an
        # argument of the traced function: its value would be baked into the plan).
        if self._foreign() and type(x) is LazyTensor and x.value is not None:
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


def value_of(lazy: LazyTensor) -> Any:
    """The value of a ready :class:`LazyTensor` (its error, if its stream failed)."""
    value = lazy.value
    if type(value) is FailedValue:
        value.reraise()
    if value is None:  # pragma: no cover - capture runs the device's stream first
        raise GraphBreak("ember: compile: a tensor of the fusion device is pending in another stream")
    return value
