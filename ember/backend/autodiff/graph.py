"""The autodiff graph: tracked primitives, nodes, ordering and ``Gradients``.

Each op on a tracked input creates a :class:`Node` holding its parents, its backward
``step``, the values the step needs (``saved``) and constants (``ctx``). The graph is
reachable only from the tensors computed in it, so it is freed with them; backward
releases each node's saved values as soon as its step has run (unless the graph is
retained, as it is for ``create_graph``).

A saved value is kept as the op's input itself (an :class:`AutodiffTensor`, so a
backward that builds a graph of its own, ``create_graph``, sees where the value came
from), as :class:`Own` (the op's own output) or, under balanced checkpointing, as a
handle to recompute (a :class:`Node` or ``SELF``). A first-order backward reads the
plain values behind them.
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
    ``(fn, handles)``: the op's output is ``fn(*values of handles)``. ``hooks``
    (``None`` or a dict, see :mod:`ember.backend.autodiff.grad_hooks`) rewrite the
    node's gradient once it is complete.
    """

    __slots__ = ("id", "parents", "step", "saved", "ctx", "recompute", "consumed", "hooks", "__weakref__")

    def __init__(self, node_id: int, parents: tuple, step: Any, saved: tuple, ctx: Any):
        self.id = node_id
        self.parents = parents
        self.step = step
        self.saved: tuple | None = saved  # None once released
        self.ctx = ctx
        self.recompute: tuple[Any, tuple] | None = None
        self.consumed = False
        self.hooks: dict[int, Any] | None = None

    def release(self) -> None:
        """Drop what backward needed; the node stays as a marker of a consumed graph."""
        self.step = None
        self.saved = None
        self.ctx = None
        self.recompute = None
        self.parents = ()
        self.consumed = True


class Own:
    """A saved handle to an op's own output (the value is the inner primitive; a
    ``create_graph`` backward sees it as the output of the node that saved it)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


class Gradients:
    """Gradients from one backward pass, keyed by node id. Values are primitives of
    the inner backend, or tracked primitives of the autodiff backend when the pass
    built a graph (``create_graph``); read them with ``tensor.grad(grads)``."""

    __slots__ = ("_grads", "create_graph")

    def __init__(self, create_graph: bool = False) -> None:
        self._grads: dict[int, Any] = {}
        #: Whether the values are tracked tensors of the autodiff device (differentiable again).
        self.create_graph = create_graph

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
        tracked = ", create_graph" if self.create_graph else ""
        return f"Gradients({len(self._grads)} tensors{tracked})"


SELF = object()  # a saved handle meaning "this node's own output" (recomputed)


_BY_ID = attrgetter("id")


def topological_order(root: Node, hooked: list[Node] | None = None) -> list[Node]:
    """The non-leaf nodes reachable from ``root``, children before parents (no recursion).

    Node ids grow with creation, so a parent's id is always lower than its child's:
    sorting by descending id is a valid order for backward. Leaves (no step) are not
    listed: backward hands their gradients straight to the result. The leaves that
    carry gradient hooks are appended to ``hooked`` when given.
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
            if parent is not None and parent not in seen:
                if parent.step is not None or parent.consumed:
                    add(parent)
                    push(parent)
                elif parent.hooks and hooked is not None:
                    add(parent)
                    hooked.append(parent)
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
        kind = type(value)
        if kind is AutodiffTensor:
            value = value.inner
        elif kind is Own:
            value = value.value
        nbytes = getattr(value, "nbytes", None)
        if nbytes is None or isinstance(value, Node):
            return
        base: Any = getattr(value, "base", None)
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
