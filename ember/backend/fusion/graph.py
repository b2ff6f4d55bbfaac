"""The graph IR: a static-shape SSA record of backend protocol calls.

A :class:`Graph` holds *values* (each an abstract tensor: shape and numpy dtype)
and *nodes*, in program order. A node is one call of a method of
:class:`ember.backend.base.Backend` (``"unary"``, ``"matmul"``, ``"conv"``,
``"adam_step_many"``...): its arguments are the call's arguments with every tensor
replaced by a :class:`Ref` to a value, and its outputs are new values. Values
enter a graph as *inputs* (bound at run time) or *constants* (held by the graph).

Composite calls (``linear``, ``softmax``, ``mse_loss``, ``adam_step_many``, conv and
pool ops) stay single nodes; a lowering without a kernel for one expands it into
primitive nodes with its composite (``ember.backend.composites``, through
``ember.backend.fusion.decompose``).

Because a node *is* a backend call, any backend executes any graph
(:mod:`ember.backend.fusion.replay`): that is the reference executor, and the
fallback of every lowering for the nodes it does not fuse.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np


class Ref(int):
    """A reference to a graph value in a node's arguments (an ``int`` subclass, so
    that it is distinguishable from static integer arguments such as dims)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"%{int(self)}"


class Sc(int):
    """A run-time scalar in a node's arguments: entry ``i`` of the run's scalar list
    (a learning rate, a bias correction, any float the graph was recorded with)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"$s{int(self)}"


class Aval:
    """An abstract value: what is known of a tensor before it is computed. Immutable
    by contract (never assigned after construction); a plain slotted class rather than
    a frozen dataclass because the fusion device makes one per recorded result and
    bound input: a frozen dataclass's ``__init__`` costs 0.37 us against 0.13 us."""

    __slots__ = ("shape", "dtype")

    shape: tuple[int, ...]
    dtype: np.dtype

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.shape = shape
        self.dtype = dtype

    def __eq__(self, other: object) -> bool:
        if type(other) is not Aval:
            return NotImplemented
        return self.shape == other.shape and self.dtype == other.dtype

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype))

    def __repr__(self) -> str:
        return f"Aval(shape={self.shape!r}, dtype={self.dtype!r})"

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize


@dataclass(slots=True)
class Node:
    """One backend call: ``outs = backend.<op>(*args, **kwargs)``.

    ``tree`` is the result's structure (see :func:`flatten`): ``None`` for a single
    tensor, else nested tuples/lists whose tensor leaves are the ``outs`` in order.
    """

    op: str
    args: tuple
    kwargs: tuple[tuple[str, Any], ...]
    outs: tuple[int, ...]
    tree: Any = None

    def refs(self) -> Iterator[Ref]:
        """The values this node reads."""
        return iter_refs(self.args)

    def key(self) -> tuple:
        """A hashable structural description: values by number, float scalars by
        whether they are zero (their values are read at run time, see :func:`_key`)."""
        kwargs = tuple((k, None if k in RUNTIME_KWARGS else _key(v)) for k, v in self.kwargs)
        return (self.op, _key(self.args), kwargs, self.outs, self.tree)


LEAF = "*"  # a tensor position in a result tree


def flatten(result: Any) -> tuple[list[Any], Any]:
    """The tensor leaves of a call's result and its tree: ``None`` for a single tensor,
    else tuples/lists of :data:`LEAF` (a tensor) and ``None`` (no tensor)."""
    if result is None:
        return [], None
    if not isinstance(result, (tuple, list)):
        return [result], None
    leaves: list[Any] = []

    def walk(x: Any) -> Any:
        if x is None:
            return None
        if isinstance(x, (tuple, list)):
            return (type(x) is list, tuple(walk(a) for a in x))
        leaves.append(x)
        return LEAF

    return leaves, walk(result)


def unflatten(tree: Any, leaves: list[Any]) -> Any:
    """Inverse of :func:`flatten`."""
    if tree is None:
        return leaves[0]
    it = iter(leaves)

    def build(t: Any) -> Any:
        if t is None:
            return None
        if t == LEAF:
            return next(it)
        is_list, items = t
        out = [build(a) for a in items]
        return out if is_list else tuple(out)

    return build(tree)


def iter_refs(args: Any) -> Iterator[Ref]:
    """Every :class:`Ref` in a (nested tuple/list) argument structure."""
    if type(args) is Ref:
        yield args
    elif isinstance(args, (tuple, list)):
        for a in args:
            yield from iter_refs(a)


def map_refs(args: Any, fn: Any, scalars: Any = None) -> Any:
    """``args`` with every :class:`Ref` replaced by ``fn(ref)`` and every :class:`Sc`
    by ``scalars[sc]`` (structure kept)."""
    kind = type(args)
    if kind is Ref:
        return fn(args)
    if kind is Sc:
        return scalars[args]
    if kind is tuple:
        return tuple(map_refs(a, fn, scalars) for a in args)
    if kind is list:
        return [map_refs(a, fn, scalars) for a in args]
    return args


#: Integer keyword arguments that change from run to run without changing the
#: computation (an optimizer's step count); read at run time like float scalars.
RUNTIME_KWARGS = frozenset({"time"})


def _key(args: Any) -> Any:
    """Structure of an argument. A float is a run-time value (a learning rate, a bias
    correction): only whether it is zero is structural, since decompositions skip
    terms with a zero factor (``weight_decay=0``)."""
    if type(args) is Ref:
        return ("%", int(args))
    if type(args) is Sc:
        return ("$", int(args))
    if isinstance(args, (tuple, list)):
        return (type(args).__name__, *(_key(a) for a in args))
    if type(args) is float:
        return ("f", args == 0.0)
    return args


@dataclass(slots=True)
class Graph:
    """Values, nodes in program order, inputs (fed per run), constants and outputs."""

    avals: list[Aval] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    consts: dict[int, Any] = field(default_factory=dict)
    outputs: list[int] = field(default_factory=list)

    def new_value(self, aval: Aval) -> Ref:
        self.avals.append(aval)
        return Ref(len(self.avals) - 1)

    def add_input(self, aval: Aval) -> Ref:
        ref = self.new_value(aval)
        self.inputs.append(ref)
        return ref

    def add_const(self, value: Any) -> Ref:
        ref = self.new_value(Aval(tuple(value.shape), np.dtype(value.dtype)))
        self.consts[ref] = value
        return ref

    def add_node(self, op: str, args: tuple, kwargs: tuple, result: Any) -> Any:
        """Records ``op``; ``result`` is its abstract result (Avals in a tree); returns
        the same tree with a :class:`Ref` per tensor."""
        avals, tree = flatten(result)
        outs = tuple(self.new_value(a) for a in avals)
        self.nodes.append(Node(op, args, kwargs, outs, tree))
        return unflatten(tree, list(outs)) if outs or tree is not None else None

    def abstract_scalars(self, offset: int = 0) -> tuple[Graph, list[Any]]:
        """This graph with every run-time scalar (each float, and each ``time``
        keyword) replaced by an :class:`Sc` placeholder numbered from ``offset``
        (placeholders already present keep theirs), and the values in order.
        Graphs of one :meth:`structure` give abstract graphs of one structure."""
        values: list[Any] = []

        def lift(x: Any) -> Any:
            kind = type(x)
            if kind is float:
                values.append(x)
                return Sc(offset + len(values) - 1)
            if kind is tuple:
                return tuple(lift(a) for a in x)
            if kind is list:
                return [lift(a) for a in x]
            return x

        nodes = []
        for node in self.nodes:
            kwargs = tuple(
                (k, lift(float(v)) if k in RUNTIME_KWARGS and v is not None and type(v) is not Sc else lift(v))
                for k, v in node.kwargs
            )
            nodes.append(Node(node.op, lift(node.args), kwargs, node.outs, node.tree))
        return Graph(self.avals, nodes, self.inputs, self.consts, self.outputs), values

    def producers(self) -> dict[int, Node]:
        """The node that computes each value."""
        return {out: node for node in self.nodes for out in node.outs}

    def prune(self) -> Graph:
        """This graph without the nodes no output depends on (dead code)."""
        needed = set(self.outputs)
        kept: list[Node] = []
        for node in reversed(self.nodes):
            if any(o in needed for o in node.outs):
                kept.append(node)
                needed.update(node.refs())
        kept.reverse()
        return Graph(self.avals, kept, self.inputs, {k: v for k, v in self.consts.items() if k in needed}, self.outputs)

    def structure(self) -> tuple:
        """A hashable key of everything but constant values: two graphs with one
        structure run with one compiled plan."""
        return (
            tuple((a.shape, a.dtype.str) for a in self.avals),
            tuple(n.key() for n in self.nodes),
            tuple(self.inputs),
            tuple(sorted(self.consts)),
            tuple(self.outputs),
        )

    def __str__(self) -> str:
        lines = [f"graph(inputs={[Ref(i) for i in self.inputs]}, outputs={[Ref(o) for o in self.outputs]})"]
        for ref in self.consts:
            a = self.avals[ref]
            lines.append(f"  {Ref(ref)!r} = const {list(a.shape)} {a.dtype}")
        for node in self.nodes:
            outs = ", ".join(repr(Ref(o)) for o in node.outs)
            avals = ", ".join(f"{list(self.avals[o].shape)} {self.avals[o].dtype}" for o in node.outs)
            args = ", ".join(repr(a) for a in node.args)
            kw = "".join(f", {k}={v!r}" for k, v in node.kwargs)
            lines.append(f"  {outs} = {node.op}({args}{kw})  # {avals}")
        return "\n".join(lines)
