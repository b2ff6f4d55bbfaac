"""Gradient-ready hooks: a callback told, during ``backward``, as soon as a leaf's
gradient is final (every op that used the leaf has run its backward step).

Data-parallel training uses it to start reducing a bucket of gradients while the
rest of backward still runs. The hook sees the node id and the gradient primitive
(of the inner backend); it must not change the gradient.

>>> with leaf_grad_hook(lambda node_id, grad: print(node_id)):  # doctest: +SKIP
...     grads = loss.backward()
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

LeafGradHook = Callable[[int, Any], None]

_HOOK: ContextVar[LeafGradHook | None] = ContextVar("ember_leaf_grad_hook", default=None)


@contextmanager
def leaf_grad_hook(hook: LeafGradHook) -> Iterator[None]:
    """Calls ``hook(node_id, grad)`` for each leaf gradient made final by a backward
    pass run inside the ``with`` block (in this thread or task)."""
    token = _HOOK.set(hook)
    try:
        yield
    finally:
        _HOOK.reset(token)


#: The hook of the enclosing ``leaf_grad_hook`` block, or ``None``: ``current_hook()``
#: (the context variable's own getter: no Python frame on every backward).
current_hook: Callable[[], LeafGradHook | None] = _HOOK.get
