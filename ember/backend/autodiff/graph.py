"""The autodiff graph: tracked primitives, nodes, ordering and ``Gradients``.

Each op on a tracked input creates a :class:`Node` holding its parents, its backward
``step``, the values the step needs (``saved``) and constants (``ctx``). The graph is
reachable only from the tensors computed in it, so it is freed with them; backward
releases each node's saved values as soon as its step has run.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from ember.errors import GraphError


class AutodiffTensor:
    """The autodiff backend's primitive: an inner primitive plus its graph node
    (``None`` when untracked)."""

    __slots__ = ("inner", "node", "shape", "dtype")

    def __init__(self, inner: Any, node: Node | None):
        self.inner = inner
        self.node = node
        self.shape = inner.shape
        self.dtype = inner.dtype

    def __repr__(self) -> str:
        return f"AutodiffTensor(node={None if self.node is None else self.node.id}, inner={self.inner!r})"


class Node:
    """One op in the graph. A leaf (a tensor that requires grad) has no ``step``.

    ``step(B, g, saved, ctx)`` returns one gradient (or ``None``) per parent.
    ``recompute``, set for memory-bound ops under balanced checkpointing, is
    ``(fn, handles)``: the op's output is ``fn(*values of handles)``.
    """

    __slots__ = ("id", "parents", "step", "saved", "ctx", "recompute", "consumed")

    def __init__(self, node_id: int, parents: tuple, step: Any, saved: tuple, ctx: Any):
        self.id = node_id
        self.parents = parents
        self.step = step
        self.saved = saved
        self.ctx = ctx
        self.recompute = None
        self.consumed = False

    @property
    def is_leaf(self) -> bool:
        return self.step is None and not self.consumed

    def release(self) -> None:
        """Drop what backward needed; the node stays as a marker of a consumed graph."""
        self.step = None
        self.saved = None
        self.ctx = None
        self.recompute = None
        self.parents = ()
        self.consumed = True


class Gradients:
    """Gradients from one backward pass, keyed by node id. Values are primitives of
    the inner backend; read them with ``tensor.grad(grads)``."""

    __slots__ = ("_grads",)

    def __init__(self) -> None:
        self._grads: dict[int, Any] = {}

    def get(self, node_id: int) -> Any:
        return self._grads.get(node_id)

    def remove(self, node_id: int) -> Any:
        return self._grads.pop(node_id, None)

    def register(self, node_id: int, grad: Any) -> None:
        self._grads[node_id] = grad

    def node_ids(self) -> list[int]:
        return list(self._grads)

    def __len__(self) -> int:
        return len(self._grads)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._grads

    def __repr__(self) -> str:
        return f"Gradients({len(self._grads)} tensors)"


SELF = object()  # a saved handle meaning "this node's own output" (recomputed)


_BY_ID = attrgetter("id")


def topological_order(root: Node) -> list[Node]:
    """The non-leaf nodes reachable from ``root``, children before parents (no recursion).

    Node ids grow with creation, so a parent's id is always lower than its child's:
    sorting by descending id is a valid order for backward. Leaves (no step) are not
    listed: backward hands their gradients straight to the result.
    """
    seen = {root}
    stack = [root]
    order: list[Node] = []
    append, pop, push, add = order.append, stack.pop, stack.append, seen.add
    while stack:
        node = pop()
        if node.consumed:
            raise GraphError(
                "ember: backward: this graph was already used by an earlier backward; each "
                "forward pass supports one backward. Recompute the forward pass (or detach "
                "the tensors you reuse across steps)"
            )
        append(node)
        for parent in node.parents:
            if parent is not None and parent not in seen and (parent.step is not None or parent.consumed):
                add(parent)
                push(parent)
    order.sort(key=_BY_ID, reverse=True)
    return order


def retained_bytes(root: Node | None) -> int:
    """Bytes of tensor values the graph below ``root`` keeps alive for backward
    (each buffer counted once). A measure for checkpointing strategies."""
    if root is None:
        return 0
    seen_nodes = {root}
    stack = [root]
    buffers: dict[int, int] = {}

    def count(value: Any) -> None:
        nbytes = getattr(value, "nbytes", None)
        if nbytes is None or isinstance(value, Node):
            return
        base = getattr(value, "base", None)
        while getattr(base, "base", None) is not None:
            base = base.base
        owner = base if base is not None else value
        buffers[id(owner)] = getattr(owner, "nbytes", nbytes)

    while stack:
        node = stack.pop()
        for value in node.saved or ():
            count(value)
        if node.recompute is not None:
            for value in node.recompute[1]:
                count(value)
        for parent in node.parents:
            if parent is not None and parent not in seen_nodes:
                seen_nodes.add(parent)
                stack.append(parent)
    return sum(buffers.values())
