"""The reference executor: a graph replayed call by call on any backend.

Every node is the backend call it recorded, so replaying it on the backend the
graph was traced over gives the eager result exactly (same kernels, same order).
A fused call the backend declines (``NotImplemented``) runs its decomposition. Each
value is dropped after its last use, so a replay holds no more memory than eager
execution would.
"""

from __future__ import annotations

from typing import Any

from ember.backend.fusion.decompose import DECOMPOSITIONS
from ember.backend.fusion.graph import Graph, flatten, map_refs
from ember.errors import EmberError


class ReplayError(EmberError, RuntimeError):
    """A backend's result disagreed with the graph's inferred shape or dtype."""


class PartialRun(Exception):
    """A node raised; ``computed`` maps the outputs computed before it to their values."""

    def __init__(self, error: BaseException, computed: dict[int, Any]):
        super().__init__(str(error))
        self.error = error
        self.computed = computed


class Replay:
    """A graph prepared for replay: the values each node frees. It runs every graph of
    the same structure (``Graph.structure``), with that graph's own scalar values."""

    def __init__(self, graph: Graph, check: bool = True):
        self.graph = graph
        self.check = check
        last_use: dict[int, int] = {}
        for i, node in enumerate(graph.nodes):
            for ref in node.refs():
                last_use[ref] = i
        keep = set(graph.outputs)
        self.frees: list[tuple[int, ...]] = [() for _ in graph.nodes]
        for ref, i in last_use.items():
            if ref not in keep:
                self.frees[i] += (ref,)

    def run(self, backend: Any, inputs: list[Any], graph: Graph | None = None) -> list[Any]:
        """The outputs of ``graph`` (default: the planned one, which has the same
        structure), given its inputs (primitives of ``backend``)."""
        graph = self.graph if graph is None else graph
        env: dict[int, Any] = dict(graph.consts)
        env.update(zip(graph.inputs, inputs))
        get = env.__getitem__
        avals = graph.avals
        for node, frees in zip(graph.nodes, self.frees):
            kwargs = dict(node.kwargs)
            args = map_refs(node.args, get)
            try:
                result = getattr(backend, node.op)(*args, **kwargs)
                if result is NotImplemented:
                    result = DECOMPOSITIONS[node.op](backend, *args, **kwargs)
            except Exception as error:
                raise PartialRun(error, {o: env[o] for o in graph.outputs if o in env}) from error
            leaves, _ = flatten(result)
            for out, value in zip(node.outs, leaves):
                if self.check:
                    aval = avals[out]
                    if tuple(value.shape) != aval.shape or value.dtype != aval.dtype:
                        raise ReplayError(
                            f"ember: fusion: {node.op} gave {list(value.shape)} {value.dtype}, but the graph "
                            f"inferred {list(aval.shape)} {aval.dtype}; this is a bug in ember's shape rules"
                        )
                env[out] = value
            for ref in frees:
                del env[ref]
        return [env[o] for o in graph.outputs]
