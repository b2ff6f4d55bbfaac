"""Helpers shared by the backward rules."""

from __future__ import annotations

from typing import Any

from ember.backend.autodiff.graph import SELF, AutodiffTensor, Node, Own
from ember.backend.dtype import DType
from ember.backend.ops import ReduceOp

Tracked = AutodiffTensor


def zeros(ops: Any, shape: tuple[int, ...], np_dtype: Any) -> Any:
    return ops.full(shape, 0, DType.from_numpy(np_dtype))


def zeros_like(ops: Any, x: Any) -> Any:
    return ops.full(x.shape, 0, DType.from_numpy(x.dtype))


def unbroadcast(ops: Any, g: Any, shape: tuple[int, ...]) -> Any:
    """Sum ``g`` over the dims that broadcasting stretched, back to ``shape``."""
    gshape = g.shape
    if gshape == shape:
        return g
    lead = len(gshape) - len(shape)
    for dim in range(len(gshape)):
        if dim < lead or (shape[dim - lead] == 1 and gshape[dim] != 1):
            g = ops.reduce(ReduceOp.SUM, g, dim)
    return ops.reshape(g, shape) if g.shape != shape else g


class RecordMixin:
    """How a rule family records a node. ``inner`` is the wrapped backend."""

    inner: Any
    _balanced: bool
    _next_id: Any

    def _keep(self, x: Tracked) -> Any:
        """A handle to ``x``'s value for a backward step: ``x`` itself (its value and
        where it came from), or under balanced checkpointing the node that can
        recompute it."""
        if self._balanced:
            node = x.node
            if node is not None and node.recompute is not None:
                return node
        return x

    def _out(self, out: Any, memory_bound: bool) -> Any:
        """A handle to an op's own output (an inner primitive) for its backward step."""
        return SELF if (memory_bound and self._balanced) else Own(out)

    def _record(
        self,
        out: Any,
        parents: tuple,
        step: Any,
        saved: tuple,
        ctx: Any,
        recompute: Any = None,
    ) -> Tracked:
        node = Node(self._next_id(), parents, step, saved, ctx)
        if recompute is not None and self._balanced:
            node.recompute = recompute
        return AutodiffTensor(out, node)
