"""What a fusion device records: its tensors (:class:`LazyTensor`), the stream of calls
since the last sync point (:class:`Stream`) and the helpers that turn a call's
arguments into a node's (tensors by :class:`Ref`, floats as :class:`Sc` run-time
scalars) while building the call's structural key.

A stream's key is one entry per node: the op, each argument's structure, and for a
ready tensor bound as an input of the stream there, its shape and dtype. Two streams
with equal keys (and outputs) run one plan. A stream that repeats the last one
(a training loop's step) *follows* it: each call whose key equals the last stream's at
the same position takes that stream's node and result shapes instead of inferring
them, and the flush takes its plan without hashing the key.
"""

from __future__ import annotations

import itertools
from sys import getrefcount
from typing import Any

import numpy as np

from ember.backend.fusion.graph import LEAF, RUNTIME_KWARGS, Aval, Graph, Ref, Sc
from ember.errors import GraphError


class LazyTensor:
    """The fusion backend's primitive: a value of the wrapped backend (``value``), or
    a pending result in a stream (``ref``) until the stream runs."""

    __slots__ = ("shape", "dtype", "value", "ref", "epoch", "__weakref__")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, value: Any = None, ref: Any = None):
        self.shape = shape
        self.dtype = dtype
        self.value = value
        # A ready tensor bound as an input of a stream: ``ref`` is its input there and
        # ``epoch`` that stream's (0: none).
        self.ref: Ref | None = ref
        self.epoch = 0

    def __repr__(self) -> str:
        state = "pending" if self.value is None else "ready"
        return f"LazyTensor({list(self.shape)}, {self.dtype}, {state})"


def pending(shape: tuple[int, ...], dtype: np.dtype, ref: Any, _new: Any = object.__new__) -> LazyTensor:
    """A pending :class:`LazyTensor` (the result ``ref`` of a stream), made without
    ``__init__``: a class call with an ``__init__`` in Python costs about twice as much
    and a training step makes one per recorded result."""
    tensor = _new(LazyTensor)
    tensor.shape = shape
    tensor.dtype = dtype
    tensor.value = None
    tensor.ref = ref
    tensor.epoch = 0
    return tensor


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
    """The ops recorded since the last sync point; once run, the template the next
    stream follows (``follow``; see the module docstring)."""

    __slots__ = ("graph", "epoch", "values", "handles", "scalars", "keys", "follow", "outputs", "plan")

    def __init__(self, follow: Stream | None = None) -> None:
        self.graph = Graph()
        self.epoch = next(_EPOCHS)  # marks the ready tensors bound as its inputs
        self.scalars: list[Any] = []  # the run-time scalars, by Sc index
        self.keys: list[tuple] = []  # each node's structure, built while recording
        self.values: list[Any] = []  # the bound inputs' values, in input order
        # Every result's handle (its ref until the stream runs), held here: at the flush
        # a handle referenced from nowhere else is dead (cheaper than a weak reference
        # per result, the same answer).
        self.handles: list[LazyTensor] = []
        # The last stream run, while each node recorded so far has its key (None: not
        # following); a template's own outputs and plan.
        self.follow = follow
        self.outputs: tuple = ()
        self.plan: Any = None

    def __len__(self) -> int:
        return len(self.graph.nodes)

    def as_template(self, outputs: tuple, plan: Any) -> Stream:
        """This stream, run with ``plan``, as the next one's template: its values and
        handles dropped (a template holds no tensor alive)."""
        self.outputs, self.plan = outputs, plan
        self.follow = None
        self.values, self.handles, self.scalars = [], [], []
        return self

    def followed(self, key: tuple) -> Any:
        """The template's node at this stream's next position if its key is ``key``
        (then the key is recorded), else ``None`` (and the stream stops following)."""
        follow = self.follow
        keys = self.keys
        i = len(keys)
        template = follow.keys  # type: ignore[union-attr]
        if i < len(template) and template[i] == key:
            keys.append(template[i])  # the template's own tuple: the flush compares by identity
            return follow.graph.nodes[i]  # type: ignore[union-attr]
        self.follow = None
        return None

    def planned_graph(self) -> Graph:
        """The graph to plan: its inputs' Avals made, its dead nodes pruned."""
        graph = self.graph
        graph.avals = [Aval(a[1], a[2]) if type(a) is tuple else a for a in graph.avals]
        return graph.prune()

    def rollback(self, args: Any, n_values: int, n_inputs: int, n_scalars: int) -> None:
        """Forgets what a call whose arguments are ``args`` (nested tuples/lists) bound
        and added before it failed: the stream is as before it."""
        _unbind(args, self.epoch, n_values)
        graph = self.graph
        del graph.avals[n_values:], graph.inputs[n_inputs:], self.values[n_inputs:], self.scalars[n_scalars:]


def _unbind(args: Any, epoch: int, n_values: int) -> None:
    for a in args:
        kind = type(a)
        if kind is LazyTensor:
            if a.value is not None and a.epoch == epoch and a.ref is not None and a.ref >= n_values:
                a.epoch = 0
        elif kind is tuple or kind is list:
            _unbind(a, epoch, n_values)


#: Marks a tensor argument in a node's structure key (before its value number).
TENSOR = object()

#: Shared Refs and Scs by number (both are immutable ints): a stream's values and
#: scalars are numbered from 0 each time, so these stay few and save a constructor
#: call per recorded value.
REFS: list[Ref] = [Ref(i) for i in range(1024)]
SCS: list[Sc] = [Sc(i) for i in range(256)]


def grow(pool: list[Any], kind: type, n: int) -> Any:
    """Entry ``n`` of a pool of shared numbers, extending it (doubling) first."""
    pool.extend(kind(i) for i in range(len(pool), max(2 * len(pool), n + 1)))
    return pool[n]


#: Marks a ready tensor bound as an input: ``(INPUT, shape, dtype)`` in the key of the
#: node that first uses it, and in the stream's Avals until a plan is built.
INPUT = object()


def bind(stream: Stream, x: LazyTensor, mark: Any) -> Ref:
    """The input Ref of the ready tensor ``x`` in ``stream``: bound on first use, when
    ``mark`` (the key's append) gets its shape and dtype."""
    ref = x.ref
    if ref is not None and x.epoch == stream.epoch:
        return ref
    value = x.value
    if type(value) is FailedValue:
        value.reraise()
    graph = stream.graph
    avals = graph.avals
    n = len(avals)
    entry = (INPUT, x.shape, x.dtype)
    avals.append(entry)  # type: ignore[arg-type]  # an Aval if a plan is built: Stream.planned_graph
    ref = REFS[n] if n < len(REFS) else grow(REFS, Ref, n)
    graph.inputs.append(ref)
    mark(entry)
    x.ref, x.epoch = ref, stream.epoch
    stream.values.append(value)
    return ref


def scalar(stream: Stream, value: float) -> Sc:
    """A run-time scalar placeholder for ``value`` (appended to the stream's scalars)."""
    scalars = stream.scalars
    n = len(scalars)
    scalars.append(value)
    return SCS[n] if n < len(SCS) else grow(SCS, Sc, n)


def abstract(args: tuple | list, stream: Stream, key: list[Any]) -> Any:
    """A call's arguments as recorded: lazy tensors by Ref (ready ones bound as inputs
    of ``stream``), floats as Sc placeholders (their values appended to the stream's
    scalars), containers walked, the rest as is; ``key`` gets their structure (a Ref
    and an equal int must differ there, a float's value must not count)."""
    out: list[Any] = []
    append, mark = out.append, key.append
    for a in args:
        kind = type(a)
        if kind is LazyTensor:
            r = a.ref if a.value is None else bind(stream, a, mark)  # pending in this stream, or an input
            append(r)
            mark(TENSOR)
            mark(r)
        elif kind is float:
            append(scalar(stream, a))
            mark("$")
        elif kind is tuple or kind is list:
            mark(kind)
            append(abstract(a, stream, key))
            mark(len(a))
        else:
            append(a)
            mark(a)
    return tuple(out) if type(args) is tuple else out


def abstract_kwargs(kwargs: dict[str, Any], stream: Stream, key: list[Any]) -> tuple:
    """A call's keyword arguments as recorded, sorted by name (see :func:`abstract`;
    an integer in ``RUNTIME_KWARGS`` is a run-time scalar too); ``key`` gets their
    structure, then their names."""
    items = sorted(kwargs.items())
    out = []
    mark = key.append
    for k, v in items:
        kind = type(v)
        if kind is float or (kind is int and k in RUNTIME_KWARGS):
            v = scalar(stream, float(v))
            mark("$")
        elif kind is LazyTensor or kind is tuple or kind is list:
            v = abstract((v,), stream, key)[0]
        else:
            mark(v)
        out.append((k, v))
    key.extend(k for k, _ in items)
    return tuple(out)


def emit(result: Any, avals: list[Aval], outs: list[Ref], handles: list) -> tuple[Any, Any]:
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
            ref = REFS[n] if n < len(REFS) else grow(REFS, Ref, n)
            outs.append(ref)
            handle = pending(item.shape, item.dtype, ref)
            handles.append(handle)
            trees.append(LEAF)
            values.append(handle)
        else:
            tree, value = emit(item, avals, outs, handles)
            trees.append(tree)
            values.append(value)
    if leaf:
        return trees[0], values[0]
    is_list = type(result) is list
    return (is_list, tuple(trees)), (values if is_list else tuple(values))


def check_dtypes(result: Any, dtypes: set[np.dtype], inner: Any) -> None:
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
            check_dtypes(item, dtypes, inner)


def rebuild(tree: Any, leaves: Any) -> Any:
    """A result of the tree ``tree`` (not ``None``; as :func:`emit` makes it) with the
    tensors ``leaves`` (an iterator), without the cycles a recursive closure leaves."""
    is_list, items = tree
    out = [None if t is None else (rebuild(t, leaves) if type(t) is tuple else next(leaves)) for t in items]
    return out if is_list else tuple(out)


def _counts(handles: list[Any]) -> list[int]:
    return [getrefcount(handle) for handle in handles]


#: A handle's reference count in :func:`live`'s walk when nothing else refers to it (the
#: list, the loop variable, getrefcount's argument: 3 on CPython 3.10-3.13), measured.
DEAD = _counts([object()])[0]


def live(handles: list[LazyTensor]) -> list[LazyTensor]:
    """The handles of ``handles`` referenced from anywhere else (a stream holds its
    results' handles: at the flush the others are dead)."""
    return [handle for handle in handles if getrefcount(handle) > DEAD]
