"""Gradient hooks on graph nodes (``tensor.register_hook``).

A hook sits on one node (a leaf or an op's output). During ``backward``, once the
node's gradient is complete (every op that used the node has run its step), each hook
is called in registration order as ``hook(grad, create_graph)``; it returns a new
gradient (a primitive of the same backend) or ``None`` to keep it. For an op's output
the rewritten gradient is what flows on to its inputs; for a leaf it is what the
``Gradients`` hold. The tensor layer wraps the user's function (Tensors in and out).

Different from :mod:`ember.backend.autodiff.hooks` (one callback per backward pass,
told each leaf's final gradient, used by data-parallel training).
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable
from typing import Any

from ember.backend.autodiff.graph import Node

#: ``hook(grad, create_graph) -> grad or None``: ``grad`` is an inner primitive in a
#: first-order pass and a tracked one of the autodiff backend under ``create_graph``.
GradHook = Callable[[Any, bool], Any]

_next_key = itertools.count().__next__


class RemovableHandle:
    """What ``register_hook`` returns: ``handle.remove()`` takes the hook off (again:
    nothing happens). Holds the node weakly."""

    __slots__ = ("_node", "_key")

    def __init__(self, node: Node, key: int):
        self._node = weakref.ref(node)
        self._key = key

    def remove(self) -> None:
        node = self._node()
        if node is not None and node.hooks is not None:
            node.hooks.pop(self._key, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def add_hook(node: Node, hook: GradHook) -> RemovableHandle:
    """Registers ``hook`` on ``node`` (after the ones it has)."""
    key = _next_key()
    if node.hooks is None:
        node.hooks = {}
    node.hooks[key] = hook
    return RemovableHandle(node, key)


def run_hooks(node: Node, grad: Any, create_graph: bool) -> Any:
    """``grad`` passed through ``node``'s hooks in order."""
    for hook in list(node.hooks.values()) if node.hooks else ():
        new = hook(grad, create_graph)
        if new is not None:
            grad = new
    return grad
