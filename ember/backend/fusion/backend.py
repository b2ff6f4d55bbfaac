"""``fusion``: lazy execution as a decorator around any backend (Burn's ``Fusion<B>``).

Ops on a fusion device are not run when called: each records a node in the
device's *stream* (a :class:`~ember.backend.fusion.graph.Graph`) and returns a
:class:`LazyTensor` that knows its shape and dtype. At a sync point (``to_data``,
``into_scalar``, ``device.sync()``) the stream is closed:
the values still referenced from Python become its outputs, everything else is
dead or internal, and the graph runs as one plan. Plans are cached by the
stream's structure (ops, shapes, dtypes; not the values of float scalars), so a
training loop that repeats its step builds its plan once.

The plan is made by the device's *executor* (:mod:`ember.backend.fusion.executors`):
the reference executor replays the recorded calls on the wrapped backend (identical
results to eager execution); compiled executors (LLVM on the CPU, the default over
flex; WGSL on cube) fuse chains of elementwise ops, reductions and their epilogues
into single kernels.
"""

from __future__ import annotations

import abc
import itertools
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.backend.base import Backend
from ember.backend.fusion.avals import DIM_ARGS, TRACEABLE, broadcast, infer, normalize_dim
from ember.backend.fusion.executors import default_executor
from ember.backend.fusion.graph import LEAF, RUNTIME_KWARGS, Aval, Graph, Node, Ref, Sc
from ember.backend.fusion.replay import PartialRun
from ember.backend.ops import BOOL_RESULT_BINARY
from ember.errors import GraphError


class LazyTensor:
    """The fusion backend's primitive: a value of the wrapped backend (``value``), or
    a pending result in a stream (``ref``) until the stream runs."""

    __slots__ = ("shape", "dtype", "value", "ref", "epoch", "__weakref__")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, value: Any = None, ref: Ref | None = None):
        self.shape = shape
        self.dtype = dtype
        self.value = value
        # A ready tensor bound as an input of a stream: ``ref`` is its input there and
        # ``epoch`` that stream's (0: none).
        self.ref = ref
        self.epoch = 0

    def __repr__(self) -> str:
        state = "pending" if self.value is None else "ready"
        return f"LazyTensor({list(self.shape)}, {self.dtype}, {state})"


#: Stream numbers (from 1).
_EPOCHS = itertools.count(1)


class FailedValue:
    """The value of a handle whose stream raised while it ran."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error

    def reraise(self) -> None:
        raise GraphError(
            f"ember: fusion: this tensor was never computed: the ops queued with it failed at a sync point "
            f"({type(self.error).__name__}: {self.error})"
        ) from self.error


class Stream:
    """The ops recorded since the last sync point."""

    __slots__ = ("graph", "epoch", "keep", "handles", "scalars", "keys")

    def __init__(self) -> None:
        self.graph = Graph()
        self.epoch = next(_EPOCHS)  # marks the ready tensors bound as its inputs
        self.scalars: list[Any] = []  # the run-time scalars, by Sc index
        self.keys: list[tuple] = []  # each node's structure, built while recording
        self.keep: list[LazyTensor] = []  # bound inputs (ready), in input order, alive while recorded
        self.handles: list[weakref.ref] = []  # every result's handle (its ref until the stream runs)

    def input_values(self) -> list[Any]:
        """The values of the bound inputs, in input order."""
        return [x.value for x in self.keep]

    def __len__(self) -> int:
        return len(self.graph.nodes)


class FusionBackend(Backend):
    """Records every traceable op of the protocol; runs the stream at sync points."""

    #: A stream is run when it reaches this many nodes, to bound what it holds.
    MAX_STREAM = 20_000
    #: Plans kept per backend (least recently built are dropped first).
    MAX_PLANS = 256
    #: Whether the inlined recorders (``binary``, ``where``) may bypass ``_record``
    #: (a subclass that records differently sets it to False).
    _inline = True

    if TYPE_CHECKING:
        # The traceable ops are recorders installed below (``_recorder``); to a type
        # checker they are the protocol's abstract methods, implemented with its signatures.
        arange = Backend.arange
        arg_reduce = Backend.arg_reduce
        argsort = Backend.argsort
        cast = Backend.cast
        cat = Backend.cat
        clamp = Backend.clamp
        cumulative = Backend.cumulative
        expand = Backend.expand
        flip = Backend.flip
        full = Backend.full
        gather = Backend.gather
        matmul = Backend.matmul
        permute = Backend.permute
        reduce = Backend.reduce
        reshape = Backend.reshape
        scatter_add = Backend.scatter_add
        select = Backend.select
        select_add = Backend.select_add
        slice = Backend.slice
        slice_assign = Backend.slice_assign
        unary = Backend.unary

    def __init__(self, inner: Backend, executor: Any = None):
        self.inner = inner
        self.name = f"fusion<{inner.name}>"
        self._stream = Stream()
        self._plans: dict[tuple, Any] = {}
        self._newest: tuple[tuple, Any] | None = None  # the last flush's (key, plan): last in _plans
        self.executor = executor if executor is not None else default_executor(inner)
        self.stats = {"flushes": 0, "nodes": 0, "plans_built": 0}
        self._dtypes: set[np.dtype] = set()  # result dtypes the wrapped backend holds

    @property
    def executor(self) -> Any:
        """What turns a stream into a plan (see :mod:`ember.backend.fusion.executors`);
        setting it drops the plans of the previous one."""
        return self._executor

    @executor.setter
    def executor(self, executor: Any) -> None:
        self._executor = executor
        self._plans.clear()

    # ------------------------------------------------------------------ recording
    def _ref(self, x: Any) -> Any:
        if type(x) is not LazyTensor:
            return x
        if x.value is None:
            return x.ref
        return _bind(self._stream, x)

    def _record(self, op: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        # The per-op cost of a fusion device (a W1 training step records 13 calls, one
        # of them Adam's update of 4 tensors with 12 inputs and 12 results): one pass
        # over the arguments and one over the results, no per-leaf calls, shared Refs.
        if op in DIM_ARGS:
            args = normalize_dim(op, args)
        result = infer(op, args, kwargs)
        single = type(result) is Aval
        dtypes = self._dtypes
        if single:
            if result.dtype not in dtypes:  # the wrapped backend's dtype errors, raised now
                self.inner.check_dtype(result.dtype)
                dtypes.add(result.dtype)
        else:
            _check_dtypes(result, dtypes, self.inner)
        stream = self._stream
        graph = stream.graph
        # Recorded abstract: tensors by Ref, floats (and an optimizer's step count) as
        # run-time scalars, so streams of one structure share a plan without a rewrite.
        key: list[Any] = [op]
        node_args = _abstract(args, stream, key)
        if kwargs:
            node_kwargs = _abstract_kwargs(kwargs, stream, key)
        else:
            node_kwargs = ()
        stream.keys.append(tuple(key))
        if single:
            return self._push(stream, op, node_args, node_kwargs, result)
        # a tree of results (linear_backward, adam_step_many): one walk
        outs: list[Ref] = []
        tree, out = _emit(result, graph.avals, outs, stream.handles)
        graph.nodes.append(Node(op, node_args, node_kwargs, tuple(outs), tree))
        if len(graph.nodes) >= self.MAX_STREAM:
            self.flush()
        return out

    def _push(self, stream: Stream, op: str, node_args: tuple, node_kwargs: tuple, result: Aval) -> LazyTensor:
        """Records a call with the single result ``result`` (its key already in the
        stream's keys): Graph.add_node and _handle, inlined."""
        graph = stream.graph
        avals = graph.avals
        n = len(avals)
        avals.append(result)
        ref = _REFS[n] if n < len(_REFS) else _grow(_REFS, Ref, n)
        graph.nodes.append(Node(op, node_args, node_kwargs, (ref,), None))
        out = LazyTensor(result.shape, result.dtype, None, ref)
        stream.handles.append(weakref.ref(out))
        if len(graph.nodes) >= self.MAX_STREAM:
            self.flush()
        return out

    # The two most recorded calls of a training step (its gradients' and optimizer's
    # elementwise math), with _record's work inlined for lazy tensors and floats; any
    # other argument, or a result dtype not checked yet, takes _record.
    def binary(self, op: Any, a: Any, b: Any) -> Any:
        kind = type(b)
        if not self._inline or type(a) is not LazyTensor or (kind is not LazyTensor and kind is not float):
            return self._record("binary", (op, a, b), {})
        shape = a.shape
        if kind is LazyTensor and b.shape != shape:
            shape = broadcast(shape, b.shape)
        result = Aval(shape, _BOOL if op in BOOL_RESULT_BINARY else a.dtype)
        if result.dtype not in self._dtypes:
            return self._record("binary", (op, a, b), {})
        stream = self._stream
        ra = a.ref if a.value is None else _bind(stream, a)
        if kind is LazyTensor:
            rb = b.ref if b.value is None else _bind(stream, b)
            stream.keys.append(("binary", op, _TENSOR, ra, _TENSOR, rb))
        else:
            rb = _scalar(stream, b)
            stream.keys.append(("binary", op, _TENSOR, ra, "$"))
        return self._push(stream, "binary", (op, ra, rb), (), result)

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        ka, kb = type(a), type(b)
        if (
            not self._inline
            or type(cond) is not LazyTensor
            or (ka is not LazyTensor and ka is not float)
            or (kb is not LazyTensor and kb is not float)
        ):
            return self._record("where", (cond, a, b), {})
        result = infer("where", (cond, a, b), {})
        if result.dtype not in self._dtypes:
            return self._record("where", (cond, a, b), {})
        stream = self._stream
        key: list[Any] = ["where"]
        node_args = _abstract((cond, a, b), stream, key)
        stream.keys.append(tuple(key))
        return self._push(stream, "where", node_args, (), result)

    def _handle(self, stream: Stream, ref: Ref) -> LazyTensor:
        aval = stream.graph.avals[ref]
        handle = LazyTensor(aval.shape, aval.dtype, None, ref)
        stream.handles.append(weakref.ref(handle))
        return handle

    def _ready(self, x: Any) -> Any:
        """The wrapped backend's value of ``x`` (running the stream if it is pending)."""
        if type(x) is not LazyTensor:
            return x
        if x.value is None:
            self.flush()
        value = x.value
        if type(value) is FailedValue:
            value.reraise()
        return value

    def _eager(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Runs ``name`` on the wrapped backend now (for ops a graph cannot hold)."""
        args = _map_lazy(args, self._ready)
        return _map_prims(getattr(self.inner, name)(*args, **kwargs), self._wrap)

    @staticmethod
    def _wrap(value: Any) -> LazyTensor:
        return LazyTensor(tuple(value.shape), value.dtype, value)

    # ------------------------------------------------------------------ sync points
    def flush(self) -> None:
        """Runs the recorded stream; every live handle gets its value."""
        stream = self._stream
        if not stream.graph.nodes:
            return
        self._stream = Stream()
        alive: list[LazyTensor] = []
        outputs: list[int] = []
        for wr in stream.handles:
            handle = wr()
            if handle is not None and handle.value is None:
                alive.append(handle)
                outputs.append(handle.ref)
        if not alive:
            return
        graph = stream.graph
        graph.outputs = outputs
        # The structure: each node's key and each input's shape and dtype (both in
        # stream.keys, in recording order), and the outputs.
        key = (tuple(stream.keys), tuple(outputs))
        stats = self.stats
        plans = self._plans
        plan = plans.get(key)  # hashing the key is most of a lookup's cost: once per flush
        if plan is None:
            plan = self.executor.plan(graph.prune())
            stats["plans_built"] += 1
            if len(plans) >= self.MAX_PLANS:
                plans.pop(next(iter(plans)))
            plans[key] = plan
        else:  # least recently used first: move it to the end (unless it is there)
            newest = self._newest
            if newest is None or newest[1] is not plan or newest[0] != key:
                del plans[key]
                plans[key] = plan
        self._newest = (key, plan)
        stats["flushes"] += 1
        stats["nodes"] += len(graph.nodes)
        try:
            values = plan.run(self.inner, stream.input_values(), stream.scalars)
        except PartialRun as partial:
            # The stream is gone: the handles it could not compute keep the error and
            # raise it again when read; those computed before the failing op keep values.
            failed = FailedValue(partial.error)
            for handle, out in zip(alive, outputs):
                handle.value = partial.computed.get(out, failed)
                handle.ref = None
            raise partial.error from None
        for handle, value in zip(alive, values):
            handle.value = value
            handle.ref = None

    def sync(self) -> None:
        self.flush()
        self.inner.sync()

    def plan_cache_size(self) -> int:
        return len(self._plans)

    # ------------------------------------------------------------------ data boundary
    def from_numpy(self, array: np.ndarray) -> LazyTensor:
        return self._wrap(self.inner.from_numpy(array))

    def to_numpy(self, x: LazyTensor) -> np.ndarray:
        return self.inner.to_numpy(self._ready(x))

    # ------------------------------------------------------------------ generator
    def random(self, shape, distribution, dtype, key, counter) -> LazyTensor:
        # A pure function of (key, counter), which the device's generator picked in
        # program order: drawn now on the wrapped backend, the stream stays open.
        return self._wrap(self.inner.random(shape, distribution, dtype, key, counter))

    def argwhere(self, x: LazyTensor) -> LazyTensor:
        return self._eager("argwhere", x)

    def linalg(self, op: Any, inputs: tuple, options: tuple = ()) -> tuple:
        # A LAPACK call is a node of the stream that a plan runs as a call of the wrapped
        # backend; lstsq, whose result shapes depend on its values, runs now.
        if op == "lstsq":
            return self._eager("linalg", op, inputs, options)
        return self._record("linalg", (op, inputs, options), {})


_BOOL = np.dtype(np.bool_)

#: Marks a tensor argument in a node's structure key (before its value number).
_TENSOR = object()

#: Shared Refs and Scs by number (both are immutable ints): a stream's values and
#: scalars are numbered from 0 each time, so these stay few and save a constructor
#: call per recorded value.
_REFS: list[Ref] = [Ref(i) for i in range(1024)]
_SCS: list[Sc] = [Sc(i) for i in range(256)]


def _grow(pool: list[Any], kind: type, n: int) -> Any:
    """Entry ``n`` of a pool of shared numbers, extending it (doubling) first."""
    pool.extend(kind(i) for i in range(len(pool), max(2 * len(pool), n + 1)))
    return pool[n]


def _bind(stream: Stream, x: LazyTensor) -> Ref:
    """The input Ref of the ready tensor ``x`` in ``stream`` (bound on first use)."""
    ref = x.ref
    if ref is not None and x.epoch == stream.epoch:
        return ref
    if type(x.value) is FailedValue:
        x.value.reraise()
    graph = stream.graph
    avals = graph.avals
    n = len(avals)
    avals.append(Aval(x.shape, x.dtype))
    ref = _REFS[n] if n < len(_REFS) else _grow(_REFS, Ref, n)
    graph.inputs.append(ref)
    stream.keys.append((x.shape, x.dtype))  # part of the plan's key (see flush)
    x.ref, x.epoch = ref, stream.epoch
    stream.keep.append(x)
    return ref


def _scalar(stream: Stream, value: float) -> Sc:
    """A run-time scalar placeholder for ``value`` (appended to the stream's scalars)."""
    scalars = stream.scalars
    n = len(scalars)
    scalars.append(value)
    return _SCS[n] if n < len(_SCS) else _grow(_SCS, Sc, n)


def _abstract(args: tuple | list, stream: Stream, key: list[Any]) -> Any:
    """A call's arguments as recorded: lazy tensors by Ref (ready ones bound as inputs
    of ``stream``), floats as Sc placeholders (their values appended to the stream's
    scalars), containers walked, the rest as is; ``key`` gets their structure (a Ref
    and an equal int must differ there, a float's value must not count)."""
    out: list[Any] = []
    append, mark = out.append, key.append
    for a in args:
        kind = type(a)
        if kind is LazyTensor:
            r = a.ref if a.value is None else _bind(stream, a)  # pending in this stream, or an input
            append(r)
            mark(_TENSOR)
            mark(r)
        elif kind is float:
            append(_scalar(stream, a))
            mark("$")
        elif kind is tuple or kind is list:
            mark(kind)
            append(_abstract(a, stream, key))
            mark(len(a))
        else:
            append(a)
            mark(a)
    return tuple(out) if type(args) is tuple else out


def _abstract_kwargs(kwargs: dict[str, Any], stream: Stream, key: list[Any]) -> tuple:
    """A call's keyword arguments as recorded, sorted by name (see :func:`_abstract`;
    an integer in ``RUNTIME_KWARGS`` is a run-time scalar too); ``key`` gets their
    structure, then their names."""
    items = sorted(kwargs.items())
    out = []
    mark = key.append
    for k, v in items:
        kind = type(v)
        if kind is float or (kind is int and k in RUNTIME_KWARGS):
            v = _scalar(stream, float(v))
            mark("$")
        elif kind is LazyTensor or kind is tuple or kind is list:
            v = _abstract((v,), stream, key)[0]
        else:
            mark(v)
        out.append((k, v))
    key.extend(k for k, _ in items)
    return tuple(out)


def _emit(result: Any, avals: list[Aval], outs: list[Ref], handles: list) -> tuple[Any, Any]:
    """A multi-output call's result recorded: a value per Aval of ``result`` (appended
    to ``avals``, its Ref to ``outs``, its handle to ``handles``); returns the node's
    tree (as :func:`~ember.backend.fusion.graph.flatten` makes it) and the result with
    a :class:`LazyTensor` per tensor."""
    if result is None:
        return None, None
    leaf = not isinstance(result, (tuple, list))
    trees, values = [], []
    for item in (result,) if leaf else result:
        if type(item) is Aval or (leaf and item is not None):  # a leaf, without a call
            n = len(avals)
            avals.append(item)
            ref = _REFS[n] if n < len(_REFS) else _grow(_REFS, Ref, n)
            outs.append(ref)
            handle = LazyTensor(item.shape, item.dtype, None, ref)
            handles.append(weakref.ref(handle))
            trees.append(LEAF)
            values.append(handle)
        else:
            tree, value = _emit(item, avals, outs, handles)
            trees.append(tree)
            values.append(value)
    if leaf:
        return trees[0], values[0]
    is_list = type(result) is list
    return (is_list, tuple(trees)), (values if is_list else tuple(values))


def _check_dtypes(result: Any, dtypes: set[np.dtype], inner: Backend) -> None:
    """Asks ``inner`` about each result dtype of an inferred result tree it was not
    asked about yet (``dtypes``: those it holds)."""
    if result is None:
        return
    if type(result) is Aval:
        if result.dtype not in dtypes:
            inner.check_dtype(result.dtype)
            dtypes.add(result.dtype)
        return
    for item in result:
        if type(item) is Aval:
            if item.dtype not in dtypes:
                inner.check_dtype(item.dtype)
                dtypes.add(item.dtype)
        elif item is not None:
            _check_dtypes(item, dtypes, inner)


def _map_lazy(args: Any, fn: Any) -> Any:
    """``args`` with each :class:`LazyTensor` replaced by ``fn(tensor)``."""
    kind = type(args)
    if kind is LazyTensor:
        return fn(args)
    if kind is tuple:
        return tuple(_map_lazy(a, fn) for a in args)
    if kind is list:
        return [_map_lazy(a, fn) for a in args]
    return args


def _map_prims(result: Any, fn: Any) -> Any:
    if result is None or result is NotImplemented:
        return result
    if isinstance(result, (tuple, list)):
        return type(result)(_map_prims(r, fn) for r in result)
    return fn(result)


def _recorder(op: str) -> Any:
    def method(self: FusionBackend, *args: Any, **kwargs: Any) -> Any:
        return self._record(op, args, kwargs)

    method.__name__ = op
    method.__qualname__ = f"FusionBackend.{op}"
    method.__doc__ = f"Records ``{op}`` in the stream."
    return method


for _op in sorted(TRACEABLE - {"random", "linalg", "binary", "where"}):  # their own methods above
    setattr(FusionBackend, _op, _recorder(_op))
abc.update_abstractmethods(FusionBackend)
