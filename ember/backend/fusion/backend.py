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
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.backend.base import Backend
from ember.backend.fusion.avals import DIM_ARGS, TRACEABLE, broadcast, infer, normalize_dim
from ember.backend.fusion.executors import default_executor
from ember.backend.fusion.graph import LEAF, Aval, Node, Ref
from ember.backend.fusion.recording import (
    REFS,
    TENSOR,
    FailedValue,
    LazyTensor,
    Stream,
    abstract,
    abstract_kwargs,
    bind,
    check_dtypes,
    emit,
    grow,
    live,
    pending,
    rebuild,
    scalar,
)
from ember.backend.fusion.replay import PartialRun
from ember.backend.ops import BOOL_RESULT_BINARY

__all__ = ["FailedValue", "FusionBackend", "LazyTensor", "Stream"]


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
        self._newest = None
        self._stream.follow = None  # its template ran a plan of the executor before

    # ------------------------------------------------------------------ recording
    def _ref(self, x: Any) -> Any:
        if type(x) is not LazyTensor:
            return x
        if x.value is None:
            return x.ref
        stream = self._stream
        stream.follow = None  # an input bound outside a node: its key entry stands alone
        return bind(stream, x, stream.keys.append)

    def _record(self, op: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        # The per-op cost of a fusion device (a W1 training step records 12 calls, one
        # of them Adam's update of 4 tensors with 12 inputs and 12 results): one pass
        # over the arguments and one over the results, no per-leaf calls, shared Refs;
        # following the last stream, no shape inference and no new node.
        if op in DIM_ARGS:
            args = normalize_dim(op, args)
        stream = self._stream
        if stream.follow is not None:
            graph = stream.graph
            counts = (len(graph.avals), len(graph.inputs), len(stream.scalars))
            key: list[Any] = [op]
            node_args = abstract(args, stream, key)
            node_kwargs = abstract_kwargs(kwargs, stream, key) if kwargs else ()
            node = stream.followed(tuple(key))
            if node is not None:
                return self._take(stream, node)
            stream.rollback((args, tuple(kwargs.values())), *counts)  # and record it anew below
        result = infer(op, args, kwargs)
        single = type(result) is Aval
        dtypes = self._dtypes
        if single:
            if result.dtype not in dtypes:  # the wrapped backend's dtype errors, raised now
                self.inner.check_dtype(result.dtype)
                dtypes.add(result.dtype)
        else:
            check_dtypes(result, dtypes, self.inner)
        graph = stream.graph
        # Recorded abstract: tensors by Ref, floats (and an optimizer's step count) as
        # run-time scalars, so streams of one structure share a plan without a rewrite.
        key = [op]
        node_args = abstract(args, stream, key)
        if kwargs:
            node_kwargs = abstract_kwargs(kwargs, stream, key)
        else:
            node_kwargs = ()
        stream.keys.append(tuple(key))
        if single:
            return self._push(stream, op, node_args, node_kwargs, result)
        # a tree of results (linear_backward, adam_step_many): one walk
        outs: list[Ref] = []
        tree, out = emit(result, graph.avals, outs, stream.handles)
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
        ref = REFS[n] if n < len(REFS) else grow(REFS, Ref, n)
        graph.nodes.append(Node(op, node_args, node_kwargs, (ref,), None))
        out = pending(result.shape, result.dtype, ref)
        stream.handles.append(out)
        if len(graph.nodes) >= self.MAX_STREAM:
            self.flush()
        return out

    def _take(self, stream: Stream, node: Node) -> Any:
        """Records the followed stream's ``node`` (its key already in the stream's
        keys): its results have that stream's shapes and numbers."""
        graph = stream.graph
        graph.nodes.append(node)
        avals = graph.avals
        template = stream.follow.graph.avals  # type: ignore[union-attr]
        handles = stream.handles
        if node.tree is None:
            ref = node.outs[0]
            aval = template[ref]
            avals.append(aval)
            out = pending(aval.shape, aval.dtype, ref)
            handles.append(out)
        else:
            out = rebuild(node.tree, iter(self._leaves(stream, node, template)))
        if len(graph.nodes) >= self.MAX_STREAM:
            self.flush()
        return out

    @staticmethod
    def _leaves(stream: Stream, node: Node, template: list[Aval]) -> list[LazyTensor]:
        """The handles of the followed ``node``'s results (numbered consecutively)."""
        outs = node.outs
        shapes = template[outs[0] : outs[-1] + 1]
        stream.graph.avals.extend(shapes)
        leaves = [pending(a.shape, a.dtype, r) for a, r in zip(shapes, outs)]
        stream.handles.extend(leaves)
        return leaves

    # The two most recorded calls of a training step (its gradients' and optimizer's
    # elementwise math), with _record's work inlined for pending lazy tensors and
    # floats; any other argument, or a result dtype not checked yet, takes _record.
    def binary(self, op: Any, a: Any, b: Any) -> Any:
        kind = type(b)
        if (
            not self._inline
            or type(a) is not LazyTensor
            or a.value is not None
            or (kind is not float and (kind is not LazyTensor or b.value is not None))
        ):
            return self._record("binary", (op, a, b), {})
        stream = self._stream
        ra = a.ref
        if stream.follow is not None:
            n = len(stream.scalars)
            if kind is float:
                scalar(stream, b)
                node = stream.followed(("binary", op, TENSOR, ra, "$"))
            else:
                node = stream.followed(("binary", op, TENSOR, ra, TENSOR, b.ref))
            if node is not None:
                return self._take(stream, node)
            del stream.scalars[n:]  # and record it anew below
        shape = a.shape
        if kind is LazyTensor and b.shape != shape:
            shape = broadcast(shape, b.shape)
        result = Aval(shape, _BOOL if op in BOOL_RESULT_BINARY else a.dtype)
        if result.dtype not in self._dtypes:
            return self._record("binary", (op, a, b), {})
        if kind is LazyTensor:
            rb = b.ref
            stream.keys.append(("binary", op, TENSOR, ra, TENSOR, rb))
        else:
            rb = scalar(stream, b)
            stream.keys.append(("binary", op, TENSOR, ra, "$"))
        return self._push(stream, "binary", (op, ra, rb), (), result)

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        ka, kb = type(a), type(b)
        if (
            not self._inline
            or self._stream.follow is not None  # _record follows
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
        node_args = abstract((cond, a, b), stream, key)
        stream.keys.append(tuple(key))
        return self._push(stream, "where", node_args, (), result)

    def adam_step_many(
        self,
        params: Any,
        grads: Any,
        moments_1: Any,
        moments_2: Any,
        max_moments_2: Any,
        **options: Any,
    ) -> Any:
        # An optimizer step records one call over every parameter (W1: 16 tensors in,
        # 12 out): lists of lazy tensors and float options are recorded here in one
        # loop, without _record's tree walks; AMSGrad and anything unusual take _record.
        args = (params, grads, moments_1, moments_2, max_moments_2)
        if not self._inline or max_moments_2 is not None or options.get("amsgrad") is not False:
            return self._record("adam_step_many", args, options)
        lists = (params, grads) if moments_1 is None and moments_2 is None else (params, grads, moments_1, moments_2)
        n = len(params)
        for group in lists:
            if type(group) is not list or len(group) != n:
                return self._record("adam_step_many", args, options)
            for x in group:
                if type(x) is not LazyTensor:
                    return self._record("adam_step_many", args, options)
        try:
            lr, beta_1, beta_2 = options["lr"], options["beta_1"], options["beta_2"]
            epsilon, weight_decay = options["epsilon"], options["weight_decay"]
            decoupled, time = options["decoupled"], options["time"]
        except KeyError:
            return self._record("adam_step_many", args, options)
        floats = (beta_1, beta_2, epsilon, lr, weight_decay)
        if len(options) != 8 or type(time) is not int or any(type(v) is not float for v in floats):
            return self._record("adam_step_many", args, options)
        dtypes = self._dtypes
        for p in params:
            if p.dtype not in dtypes:
                return self._record("adam_step_many", args, options)
        stream = self._stream
        graph = stream.graph
        counts = (len(graph.avals), len(graph.inputs), len(stream.scalars))
        # A key of its own layout (the op's name, then an int: never a _record key).
        key: list[Any] = ["adam_step_many", n, len(lists), decoupled]
        mark = key.append
        node_args: list[Any] = []
        for group in lists:
            refs = []
            for x in group:
                r = x.ref if x.value is None else bind(stream, x, mark)
                refs.append(r)
                mark(r)
            node_args.append(refs)
        s = [scalar(stream, v) for v in floats]
        t = scalar(stream, float(time))
        if stream.follow is not None:
            node = stream.followed(tuple(key))
            if node is not None:
                graph.nodes.append(node)
                out = self._leaves(stream, node, stream.follow.graph.avals)
                if len(graph.nodes) >= self.MAX_STREAM:
                    self.flush()
                return out[:n], out[n : 2 * n], out[2 * n :], None
            stream.rollback(lists, *counts)
            return self.adam_step_many(params, grads, moments_1, moments_2, max_moments_2, **options)
        stream.keys.append(tuple(key))
        if len(lists) == 2:
            node_args += [None, None]
        node_args.append(None)
        kwargs = (
            ("amsgrad", False),
            ("beta_1", s[0]),
            ("beta_2", s[1]),
            ("decoupled", decoupled),
            ("epsilon", s[2]),
            ("lr", s[3]),
            ("time", t),
            ("weight_decay", s[4]),
        )
        avals = graph.avals
        handles = stream.handles
        shared = [Aval(p.shape, p.dtype) for p in params]  # a parameter's and its moments'
        results: list[list[LazyTensor]] = []
        outs: list[Ref] = []
        for _ in range(3):
            group_out = []
            for aval in shared:
                k = len(avals)
                avals.append(aval)
                ref = REFS[k] if k < len(REFS) else grow(REFS, Ref, k)
                outs.append(ref)
                handle = pending(aval.shape, aval.dtype, ref)
                handles.append(handle)
                group_out.append(handle)
            results.append(group_out)
        leaves = (True, (LEAF,) * n)
        graph.nodes.append(
            Node("adam_step_many", tuple(node_args), kwargs, tuple(outs), (False, (leaves, leaves, leaves, None)))
        )
        if len(graph.nodes) >= self.MAX_STREAM:
            self.flush()
        return results[0], results[1], results[2], None

    def _handle(self, stream: Stream, ref: Ref) -> LazyTensor:
        aval = stream.graph.avals[ref]
        handle = LazyTensor(aval.shape, aval.dtype, None, ref)
        stream.handles.append(handle)
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
        alive = live(stream.handles)  # pending until the stream runs
        if not alive:
            return
        outputs: list[Any] = [handle.ref for handle in alive]
        graph = stream.graph
        graph.outputs = outputs
        outs = tuple(outputs)
        stats = self.stats
        follow = stream.follow
        if (
            follow is not None
            and len(stream.keys) == len(follow.keys)
            and outs == follow.outputs
            and self._last_plan() is follow.plan
        ):
            plan = follow.plan  # every node followed the last stream's, the outputs are its
        else:
            plan = self._plan(stream, outs)
        stats["flushes"] += 1
        stats["nodes"] += len(graph.nodes)
        try:
            values = plan.run(self.inner, stream.values, stream.scalars)
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
        if len(stream.keys) == len(graph.nodes) and not self._stream.graph.nodes:
            self._stream.follow = stream.as_template(outs, plan)

    def _last_plan(self) -> Any:
        """The most recently used plan still cached (``None``: none is)."""
        return next(reversed(self._plans.values()), None)

    def _plan(self, stream: Stream, outs: tuple) -> Any:
        """The plan of ``stream`` (with outputs ``outs``): cached by its structure (each
        node's key, the outputs), else built."""
        key = (tuple(stream.keys), outs)
        newest = self._newest
        if newest is not None and newest[0] == key and self._last_plan() is newest[1]:
            # A loop's stream repeats the last one: equal keys, compared without hashing
            # (hashing the key is most of a dict lookup's cost); it is last in the LRU.
            return newest[1]
        plans = self._plans
        plan = plans.get(key)
        if plan is None:
            plan = self.executor.plan(stream.planned_graph())
            self.stats["plans_built"] += 1
            if len(plans) >= self.MAX_PLANS:
                plans.pop(next(iter(plans)))
            plans[key] = plan
        else:  # least recently used first: move it to the end
            del plans[key]
            plans[key] = plan
        self._newest = (key, plan)
        return plan

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


for _op in sorted(TRACEABLE - {"random", "linalg", "binary", "where", "adam_step_many"}):  # their own methods above
    setattr(FusionBackend, _op, _recorder(_op))
abc.update_abstractmethods(FusionBackend)
