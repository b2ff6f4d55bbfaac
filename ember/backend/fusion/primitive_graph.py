"""Expansion: a graph of backend calls rewritten over the primitives a lowering fuses.

:func:`expand` walks a source graph and builds a *lowered* graph:

* composite calls the lowering asks for (softmax, linear, adam_step_many, ...) are
  replaced by their decompositions (:mod:`ember.backend.fusion.decompose`: the fused
  ops' composites of :mod:`ember.backend.composites`), run over a
  :class:`GraphBuilder` (a backend whose ops record nodes), so each composite is
  written once for eager fallbacks and lowerings alike;
* the run-time scalars of the source graph (its :class:`~ember.backend.fusion.graph.Sc`
  placeholders: learning rates, bias corrections, ``time``) become inputs of a
  :class:`~ember.backend.fusion.scalars.ScalarProgram`, so the arithmetic a
  decomposition does on them (``lr / (1 - beta_1 ** time)``) is recorded, not
  baked in; a truth test on one (``if weight_decay:``) answers with the value
  the expansion was made for and records a guard;
* other calls are copied, their placeholders replaced by the program's scalars.

The lowered graph keeps the source's value numbers; values a composite produced
are renamed through ``alias``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember.backend.fusion.avals import DIM_ARGS, TRACEABLE, infer, normalize_dim
from ember.backend.fusion.decompose import DECOMPOSITIONS
from ember.backend.fusion.graph import Aval, Graph, Node, Ref, Sc, flatten, map_refs
from ember.backend.fusion.scalars import ScalarProgram, SymScalar
from ember.backend.ops import BinaryOp


class Value:
    """A graph value seen by a decomposition: its ref, shape and dtype."""

    __slots__ = ("ref", "shape", "dtype")

    def __init__(self, ref: Ref, aval: Aval):
        self.ref = ref
        self.shape = aval.shape
        self.dtype = aval.dtype

    def __repr__(self) -> str:
        return f"Value({self.ref!r}, {list(self.shape)}, {self.dtype})"


class GraphBuilder:
    """A backend whose every protocol call appends a node to ``graph``."""

    def __init__(self, graph: Graph):
        self.graph = graph

    def __getattr__(self, op: str) -> Callable[..., Any]:
        if op not in TRACEABLE:
            raise AttributeError(op)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self.record(op, args, kwargs)

        return call

    def record(self, op: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        graph = self.graph
        if op in DIM_ARGS:
            args = normalize_dim(op, args)
        avals = _map_values(args, lambda v: graph.avals[v.ref])
        result = infer(op, avals, kwargs)
        refs = graph.add_node(op, _map_values(args, lambda v: v.ref), tuple(sorted(kwargs.items())), result)
        return map_refs(refs, lambda r: Value(r, graph.avals[r]))


@dataclass
class Expanded:
    """The lowered graph, its scalar program, and how values were renamed."""

    graph: Graph
    program: ScalarProgram
    origin: list[int] = field(default_factory=list)  # lowered node -> source node index
    alias: dict[int, int] = field(default_factory=dict)  # source value -> lowered value
    expanded: list[int] = field(default_factory=list)  # source nodes replaced by decompositions

    def resolve(self, ref: int) -> int:
        return self.alias.get(ref, ref)


_FLOATS = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
_BOOL = np.dtype(np.bool_)


#: The composites the compiling lowerings (LLVM, CUDA C; WGSL less softmax and
#: log_softmax) replace by their decompositions when their operands are float32 or
#: float64 (:func:`float_operands`).
FLOAT_EXPANSIONS = frozenset(
    {
        "relu",
        "relu_backward",
        "sigmoid",
        "gelu",
        "gelu_backward",
        "layer_norm",
        "layer_norm_backward",
        "rms_norm",
        "rms_norm_backward",
        "softmax",
        "log_softmax",
        "linear",
        "linear_backward",
        "mse_loss",
        "adam_step_many",
        "attention",
        "attention_backward",
    }
)


def float_operands(graph: Graph, node: Node) -> bool:
    """Whether every tensor a node reads, bool masks aside, is float32 or float64, all
    of one dtype."""
    dtypes = {graph.avals[r].dtype for r in node.refs()} - {_BOOL}
    return len(dtypes) == 1 and dtypes <= _FLOATS


def expand(
    source: Graph,
    scalars: list[Any],
    wants: Callable[[Graph, Node], bool],
    fixed: dict[int, Any] | None = None,
    fold: bool = False,
) -> Expanded:
    """Expands the composite nodes of ``source`` for which ``wants(source, node)`` holds,
    for the run-time ``scalars`` given (they decide the truth tests a decomposition
    makes; the program's guards say when other values need another expansion).
    Placeholders in ``fixed`` (slot -> value) are constants, not run-time scalars: the
    program's inputs are the other slots, in order.

    ``relu`` on an integer tensor becomes ``maximum(x, 0)`` (its decomposition clamps
    with a float bound, which is for float tensors). With ``fold`` (a lowering whose
    constants are numpy arrays), an ``arange`` of fixed bounds becomes a constant of the
    lowered graph instead of a call each run.
    """
    graph = Graph(list(source.avals), [], list(source.inputs), dict(source.consts), [])
    program = ScalarProgram()
    fixed = fixed or {}
    syms = [fixed[i] if i in fixed else program.input(value) for i, value in enumerate(scalars)]
    syms += [fixed[i] for i in range(len(syms), max(fixed, default=-1) + 1)]
    out = Expanded(graph, program)
    builder = GraphBuilder(graph)
    resolve = out.resolve

    def lift(args: Any) -> Any:
        return map_refs(args, lambda r: Ref(resolve(r)), syms)

    for index, node in enumerate(source.nodes):
        args = lift(node.args)
        kwargs = tuple((k, lift(v)) for k, v in node.kwargs)
        first = len(graph.nodes)
        if fold and node.op == "arange" and _foldable(args):
            graph.consts[node.outs[0]] = np.arange(*args[:3], dtype=graph.avals[node.outs[0]].dtype)
            continue
        if node.op == "relu" and graph.avals[args[0]].dtype.kind in "iub":
            graph.nodes.append(Node("binary", (BinaryOp.MAXIMUM, args[0], 0), (), node.outs))
            out.origin.append(index)
            continue
        if node.op in DECOMPOSITIONS and wants(source, node):
            values = map_refs(args, lambda r: Value(r, graph.avals[r]))
            result = DECOMPOSITIONS[node.op](builder, *values, **dict(kwargs))
            leaves, _ = flatten(result)
            for src, value in zip(node.outs, leaves):
                out.alias[src] = value.ref
            out.origin.extend([index] * (len(graph.nodes) - first))
            out.expanded.append(index)
            continue
        graph.nodes.append(Node(node.op, args, kwargs, node.outs, node.tree))
        out.origin.append(index)
    graph.outputs = [resolve(o) for o in source.outputs]
    return out


#: The longest ``arange`` folded into a constant (kept for the plan's life).
FOLD_LIMIT = 1 << 16


def _foldable(args: tuple) -> bool:
    return all(type(a) is int for a in args[:3]) and args[2] != 0 and len(range(*args[:3])) <= FOLD_LIMIT


def is_scalar(value: Any) -> bool:
    """Whether a call argument is a run-time scalar of an expanded graph."""
    return type(value) is SymScalar


def _map_values(args: Any, fn: Callable[[Value], Any]) -> Any:
    kind = type(args)
    if kind is Value:
        return fn(args)
    if kind is tuple:
        return tuple(_map_values(a, fn) for a in args)
    if kind is list:
        return [_map_values(a, fn) for a in args]
    return args


__all__ = ["Expanded", "GraphBuilder", "Sc", "Value", "expand", "float_operands", "is_scalar"]
