"""What the fusion layer runs or expands in place of a recorded composite call.

:data:`DECOMPOSITIONS` maps a backend call to ``fn(ops, *args, **kwargs)`` over the
primitive ops of any backend ``ops``: every fused op's composite, written once in
:mod:`ember.backend.composites` (the same definition the tensor layer falls back to),
plus ``embedding`` as a gather (the form a lowering's gather loop runs; the protocol's
default, :meth:`ember.backend.module_ops.ModuleOps.embedding`, selects rows). An
executor runs one when the backend it lowers to returns ``NotImplemented`` for the
call (:func:`call_node`); a lowering expands a composite node with it into primitive
nodes it can fuse (run over a recording backend, a decomposition *is* that expansion).
Float arguments may arrive as run-time scalars
(:class:`~ember.backend.fusion.scalars.SymScalar`), which the composites keep symbolic.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ember.backend.composites import COMPOSITES
from ember.backend.fusion.graph import Node, Ref, flatten
from ember.backend.fusion.scalars import SymScalar


def embedding(ops, weights, indices):
    """Rows of ``weights`` by ``indices``: a gather along dim 0 of the index column
    broadcast over the row's width (a lowering's gather loop checks the indices)."""
    n, d = math.prod(indices.shape), weights.shape[1]
    rows = ops.expand(ops.reshape(indices, (n, 1)), (n, d))
    return ops.reshape(ops.gather(weights, 0, rows), tuple(indices.shape) + (d,))


#: backend call -> its decomposition ``fn(ops, *args, **kwargs)``.
DECOMPOSITIONS: dict[str, Callable[..., Any]] = {**COMPOSITES, "embedding": embedding}


def call_node(backend: Any, node: Node, ref_value: Callable[[Ref], Any], scalar_value: Callable[[Any], Any]) -> list:
    """Runs ``node`` on ``backend`` (its decomposition where the backend returns
    ``NotImplemented``), with each Ref argument given by ``ref_value`` and each run-time
    scalar by ``scalar_value``; returns the result's leaves (what executors do for the
    steps they do not lower)."""

    def arg(a: Any) -> Any:
        kind = type(a)
        if kind is Ref:
            return ref_value(a)
        if kind is SymScalar:
            return scalar_value(a)
        if kind is tuple:
            return tuple(arg(x) for x in a)
        if kind is list:
            return [arg(x) for x in a]
        return a

    args = arg(node.args)
    kwargs = {k: arg(v) for k, v in node.kwargs}
    result = getattr(backend, node.op)(*args, **kwargs)
    if result is NotImplemented:
        result = DECOMPOSITIONS[node.op](backend, *args, **kwargs)
    return flatten(result)[0]
