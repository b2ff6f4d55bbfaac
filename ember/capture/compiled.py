"""``ember.compile``: a Python function traced once into a graph, then replayed.

The first call with a new *guard key* (the arguments' shapes, dtypes and devices,
the modules' parameter ids, the Python values that are not floats) runs the
function under a trace (:mod:`ember.capture.trace`): everything it computes
on its devices — forward, the backward that autodiff's rules emit, the optimizer
update — becomes one graph, which an executor plans once. Later calls replay the
plan: no Python per op. Float arguments and optimizer step counts are run-time
scalars; a comparison on one becomes a guard, checked per call.

Parameters are *donated*: the model a compiled step returns holds its parameters
in buffers the next call updates in place (as ``jax.jit(donate_argnums=...)`` and
PyTorch's in-place ``optimizer.step()`` do); the model passed in is read, not
changed. Keep a copy (``model.fork(device)``) of a model you want to keep. The
optimizer's states are updated in place too: the moments a step writes back are
written into the arrays it read. Where the executor can (the LLVM executor over
flex, see ``LLVMPlan.run(donated=...)``), the new values are computed straight into
those arrays; the steady state holds them in a ``Binding`` and passes only the
other inputs per call. A call with a model this entry did not return, or with
states it did not write, first copies them (the caller's arrays stay untouched).

On a fusion device (``Device.flex().fusion()``, ``Device.wgpu().fusion()``, with or
without autodiff) a compiled function is whole-step fusion: it is traced for the
backend under the fusion decorator and planned by the device's executor (LLVM over
flex, WGSL over wgpu). Each call first runs the ops the device has queued, reads its
inputs as their ready values and returns the device's lazy tensors, holding the
results; which of these steps a call takes is chosen when it is traced, so other
devices pay nothing for them.

When the function cannot be traced (it reads a tensor's value, calls an op with no
graph rule, ...), that guard key runs eagerly from then on, with a one-time warning
naming the cause; results are the same either way.
"""

from __future__ import annotations

import operator
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ember.backend.fusion.executors import ReplayExecutor
from ember.backend.fusion.replay import Replay
from ember.backend.fusion.scalars import GraphBreak
from ember.capture.entry import Entry
from ember.capture.leaves import LEAVES_KEPT, devices, innermost, module_key, module_leaves, tensor_key
from ember.capture.pytree import flatten, flatten_result, static_key, unflatten
from ember.capture.sources import RETRACE, Argument, Parameter, Running, ScalarArgument
from ember.capture.trace import Trace, capture
from ember.errors import ConfigError, GraphError
from ember.module import Module
from ember.tensor import Tensor, autocast


class CompileWarning(UserWarning):
    """A compiled function fell back to eager execution."""


class RecompileWarning(UserWarning):
    """A compiled function traced more shapes than it keeps (``max_traces``): each new
    shape traces and compiles again (PyTorch's recompile limit)."""


class CompiledFunction:
    """A function traced per guard key and replayed (see the module docstring)."""

    def __init__(
        self,
        fn: Callable[..., Any],
        max_traces: int = 8,
        executor: Any = None,
        donate: tuple[int, ...] = (),
        recompile_warning: bool = True,
    ):
        self.fn = fn
        self.donate = frozenset(donate)
        self.max_traces = max_traces
        self.executor = executor
        self._entries: dict[Any, Entry] = {}
        self._eager: dict[Any, str] = {}
        # The fast path (see __call__): the last call's arguments, key, entry, autocast
        # state, and where its leaves sit among the arguments (None: every argument is one).
        self._last: tuple[tuple, Any, Entry, Any, tuple[int, ...] | None] | None = None
        self._module_keys: list[tuple[weakref.ref, Any]] = []  # see _module_key
        self.stats = {"calls": 0, "traces": 0, "replays": 0, "eager": 0, "evictions": 0, "retraces": 0}
        #: Whether a new trace's first call replays its graph op by op and compiles from
        #: its second (the default: an entry that runs once is never compiled), or is
        #: compiled at once so that all its calls compute the same way (a function or
        #: ``fn() -> bool``, asked at each trace; the Learner's resumable steps use it).
        self.defer_first_plan: bool | Callable[[], bool] = True
        self._ran: Entry | None = None  # the entry the last call past the fast path ran
        self._warned = not recompile_warning
        self.__wrapped__ = fn
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", "compiled")

    def executor_for(self, backend: Any, fusion: Any = None) -> Any:
        """The executor of this function's plans: the one given, else the fusion
        layer's default for the backend (LLVM over flex, WGSL tapes over wgpu, CUDA
        Graphs over cuda, replay elsewhere); on a fusion device (``fusion``, its
        FusionBackend, over ``backend``), the device's own executor."""
        if self.executor is not None:
            return self.executor
        from ember.backend.fusion.executors import default_executor

        executor = fusion.executor if fusion is not None else default_executor(backend)
        return _ReplayExecutor() if isinstance(executor, ReplayExecutor) else executor

    def cache_size(self) -> int:
        """How many traces are kept."""
        return len(self._entries)

    def cache_info(self) -> dict[str, int]:
        """The trace cache in numbers: ``entries`` kept (at most ``max_entries``, the
        least recently used dropped first), ``traces`` made, ``hits`` (calls that
        replayed a trace), ``evictions``, ``retraces`` (a trace whose guards failed) and
        ``eager`` (guard keys that run eagerly)."""
        stats = self.stats
        return {
            "entries": len(self._entries),
            "max_entries": self.max_traces,
            "traces": stats["traces"],
            "hits": stats["replays"],
            "evictions": stats["evictions"],
            "retraces": stats["retraces"],
            "eager": len(self._eager),
        }

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        stats = self.stats
        stats["calls"] += 1
        # Fast path: the same tensors and modules as the last call (a training loop's
        # steady state; the module being the one the last call returned), floats
        # anywhere: the key is the last call's.
        last = self._last
        if not kwargs and last is not None and len(args) == len(last[0]) and last[3] == autocast.state_key():
            prev = last[0]
            # Identical arguments (checked in C), or identical but for floats.
            if all(map(_is, args, prev)) or all(
                a is b or (type(a) is float and type(b) is float) for a, b in zip(args, prev)
            ):
                at = last[4]  # static arguments (None, ints, strings) are not leaves
                result = last[2].run(list(args) if at is None else [args[i] for i in at])
                if result is not RETRACE:
                    # The arguments are last call's (floats aside), and so is the module
                    # the next call will pass: the fast path stays armed as it is.
                    stats["replays"] += 1
                    return result
                self._last = None
        leaves: list[Any] = []
        spec = flatten((args, kwargs), leaves)
        key = self._key(spec, leaves)
        if key in self._eager:
            self.stats["eager"] += 1
            return self._run_eagerly(args, kwargs)
        entry = self._entries.get(key)
        if entry is not None:
            result = entry.run(leaves)
            if result is not RETRACE:
                self.stats["replays"] += 1
                self._ran = entry
                entries = self._entries
                if len(entries) > 1:  # kept in order of use: the least recently used goes first
                    entries[key] = entries.pop(key)
                self._remember(args, kwargs, key, entry, result)
                return result
            self.stats["retraces"] += 1
            del self._entries[key]
        self._last = None
        return self._trace_and_run(key, spec, leaves, args, kwargs)

    def _remember(self, args: tuple, kwargs: dict, key: Any, entry: Entry, result: Any) -> None:
        """Arms the fast path when the arguments are flat (tensors, modules, numbers):
        identical objects next time mean an identical key."""
        if kwargs or not all(type(a) in _FLAT_KINDS or isinstance(a, (Tensor, Module)) for a in args):
            self._last = None
            return
        at = tuple(i for i, a in enumerate(args) if type(a) is float or isinstance(a, (Tensor, Module)))
        leaves_at = None if len(at) == len(args) else at
        self._last = (_fast_args(args, result, entry), key, entry, autocast.state_key(), leaves_at)

    def _key(self, spec: Any, leaves: list[Any]) -> tuple:
        parts: list[Any] = [static_key(spec), autocast.state_key()]
        for leaf in leaves:
            if isinstance(leaf, Tensor):
                parts.append(tensor_key(leaf))
            elif isinstance(leaf, Module):
                parts.append(self._module_key(leaf))
            else:
                parts.append("scalar")
        return tuple(parts)

    def _module_key(self, module: Module) -> Any:
        for entry in self._entries.values():
            if entry.model_out is module:  # the module a replay returned: its key is known
                return entry.model_out_key
        # A module passed again (a decode step's model): a built module is a value, so
        # its key is the one computed last time (kept weakly, as module_leaves keeps
        # walks), unless it has running states (their values are replaced per step).
        if module_leaves(module)[1]:
            return module_key(module)
        keys = self._module_keys
        for i, (ref, key) in enumerate(keys):
            if ref() is module:
                if i:
                    keys.insert(0, keys.pop(i))
                return key
        key = module_key(module)
        keys.insert(0, (weakref.ref(module), key))
        del keys[LEAVES_KEPT:]
        return key

    def _trace_and_run(self, key: Any, spec: Any, leaves: list[Any], args: tuple, kwargs: dict) -> Any:
        found = devices(leaves)
        if len(found) != 1:
            return self._fall_back(key, args, kwargs, f"the arguments live on {len(found)} devices, not one")
        device = found[0]
        for leaf in leaves:
            if isinstance(leaf, Module):
                for p in module_leaves(leaf)[0]:
                    p.val()  # lazy parameters draw their values now, not in the trace
        try:
            with capture([device]) as trace:
                traced_leaves = self._trace_inputs(trace, leaves)
                t_args, t_kwargs = unflatten(spec, traced_leaves)
                result = self.fn(*t_args, **t_kwargs)
                result_leaves: list[Any] = []
                result_spec = flatten_result(result, result_leaves)
                tracer = trace.backends[0]
                executor = self.executor_for(tracer.inner, tracer.fusion)
                defer = self.defer_first_plan
                entry = Entry(
                    executor,
                    self.donate,
                    trace,
                    spec,
                    result_spec,
                    result_leaves,
                    tracer.inner,
                    leaves,
                    tracer.fusion,
                    defer() if callable(defer) else defer,
                )
        except GraphBreak as error:
            return self._fall_back(key, args, kwargs, str(error))
        self._check_trace(entry, leaves)
        self.stats["traces"] += 1
        if len(self._entries) >= self.max_traces:
            self._entries.pop(next(iter(self._entries)))
            self.stats["evictions"] += 1
            self._warn_recompiles(leaves)
        out = entry.run(leaves)
        if out is RETRACE:  # pragma: no cover - the trace just read these states
            raise GraphError("ember: compile: a fresh trace failed its own guards")
        # The key of the returned module is its identity from now on.
        self._entries[key] = entry
        self._ran = entry
        return out

    def _check_trace(self, entry: Entry, leaves: list[Any]) -> None:
        """A hook run on each new trace before it is kept (buckets check their rows)."""

    def _warn_recompiles(self, leaves: list[Any]) -> None:
        """Warns once that this function's traces no longer fit its cache."""
        if self._warned:
            return
        self._warned = True
        shapes = ", ".join(str(leaf.dims()) for leaf in leaves if isinstance(leaf, Tensor)) or "no tensors"
        warnings.warn(
            f"ember: compile: {self.__name__} traced {self.stats['traces']} times and keeps {self.max_traces} "
            f"traces (max_traces): each new argument shape traces and compiles again (this call's tensors: "
            f"{shapes}). Where a dim varies from call to call (a batch, a sequence), bucket it "
            "(ember.compile(fn, buckets={'x': 0})) or raise max_traces",
            RecompileWarning,
            stacklevel=4,
        )

    def _run_eagerly(self, args: tuple, kwargs: dict) -> Any:
        """Runs the function eagerly (a guard key the trace cannot hold)."""
        return self.fn(*args, **kwargs)

    def _trace_inputs(self, trace: Trace, leaves: list[Any]) -> list[Any]:
        traced: list[Any] = []
        for i, leaf in enumerate(leaves):
            if isinstance(leaf, Tensor):
                trace.add_input(innermost(leaf), Argument(i))
                traced.append(leaf)
            elif isinstance(leaf, Module):
                params, states = module_leaves(leaf)
                for j, p in enumerate(params):
                    trace.add_input(innermost(p.val()), Parameter(i, j))
                for j, s in enumerate(states):
                    trace.add_running(s, Running(i, j))
                traced.append(leaf)
            else:
                traced.append(trace.scalar_input(leaf, ScalarArgument(i)))
        return traced

    def _fall_back(self, key: Any, args: tuple, kwargs: dict, reason: str) -> Any:
        self._eager[key] = reason
        warnings.warn(
            f"ember: compile: {self.__name__} runs eagerly for these arguments: {reason}",
            CompileWarning,
            stacklevel=3,
        )
        self.stats["eager"] += 1
        return self._run_eagerly(args, kwargs)


_FLAT_KINDS = frozenset({float, int, bool, str, type(None)})
_is = operator.is_


def _fast_args(args: tuple, result: Any, entry: Entry) -> tuple:
    """The arguments the next call must repeat for the fast path: these, with a module
    argument replaced by the module this call returned (what a loop passes next)."""
    out = entry.model_out
    if out is None:
        return args
    return tuple(out if isinstance(a, Module) else a for a in args)


class _ReplayExecutor:
    def plan(self, graph: Any) -> Replay:
        return Replay(graph, check=False)


def compile(
    fn: Callable[..., Any] | None = None,
    *,
    max_traces: int = 8,
    executor: Any = None,
    donate: tuple[int, ...] = (),
    buckets: Mapping[str | int, int] | None = None,
    bucket_sizes: Sequence[int] | None = None,
    recompile_warning: bool = True,
) -> Any:
    """Trace ``fn`` once per guard key and replay it without Python per op.

    >>> step = ember.compile(train_step)           # doctest: +SKIP
    >>> model, loss = step(model, x, y)            # doctest: +SKIP

    ``max_traces`` bounds the traces kept (the least recently used is dropped first;
    the first drop warns once, with a :class:`RecompileWarning`). Use as a decorator
    too (``@ember.compile`` or ``@ember.compile(max_traces=4)``). ``cache_info()``
    reports the cache: entries, traces, hits, evictions. ``recompile_warning=False``
    silences the warning for a cache that many unrelated calls share by design
    (``generate``'s steps: one trace per model, batch and length).

    ``buckets`` names arguments (by name or position) and the dim of their tensors
    that holds independent rows (``{"x": 0}``: a batch): a call pads those rows up to
    a bucket (the next power of two, or the next of ``bucket_sizes``), runs that
    bucket's trace and slices the results back, so a varying batch traces once per
    bucket. A trace whose ops mix rows (a mean over the batch, a product contracting
    it) raises :class:`~ember.capture.BucketError` naming the op
    (:mod:`ember.capture.buckets`).

    ``donate`` names positional arguments whose tensors the caller gives up (as
    ``jax.jit(donate_argnums=...)``): a result tensor of the same shape and dtype (the
    first not yet paired, in order) may be computed into one's array, where the
    executor can (LLVM over flex). A decode step passing its KV cache and getting the
    new one back then updates it in place; the tensors passed there must not be read
    after the call (they may hold the new values).
    """
    if buckets is not None or bucket_sizes is not None:
        from ember.capture.bucketed import BucketedFunction

        if buckets is None:
            raise ConfigError("ember: compile: bucket_sizes needs buckets (which arguments' dim to pad)")
        if fn is None:
            return lambda f: BucketedFunction(f, buckets, bucket_sizes, max_traces, executor, donate, recompile_warning)
        return BucketedFunction(fn, buckets, bucket_sizes, max_traces, executor, donate, recompile_warning)
    if fn is None:
        return lambda f: CompiledFunction(f, max_traces, executor, donate, recompile_warning)
    return CompiledFunction(fn, max_traces, executor, donate, recompile_warning)


__all__ = ["CompileWarning", "CompiledFunction", "RecompileWarning", "compile"]
