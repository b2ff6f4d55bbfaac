"""Custom backward steps: a user's function recorded as one node of the graph
(``ember.autograd.Function``, ``ember.func.custom_vjp``).

A call with ``k`` tracked outputs records a *function node* ``F`` whose parents are
the call's inputs, and one *output node* per output whose only parent is ``F``. An
output node's step files its gradient with ``F`` (the engine runs every output node
before ``F``: ids grow with creation) and passes ``F`` one token to make it run; ``F``'s
step then hands the user's backward one gradient per output (``None`` for an output no
gradient reached) and returns one gradient per input.

Saved values are inputs (tracked, so that a ``create_graph`` backward differentiates
through them), constants, or the call's own outputs, held as :class:`OutputRef` (the
output's node weakly: the function node must not keep its own outputs' nodes alive).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

from ember.backend.autodiff.graph import AutodiffTensor, Node
from ember.backend.autodiff.rules.common import RecordMixin

#: ``backward(grads, saved, create_graph) -> one gradient (or None) per input``: ``grads``
#: has one entry per output (``None`` where no gradient reached it), ``saved`` the
#: saved values; all are inner primitives in a first-order pass and tracked
#: primitives of the autodiff backend under ``create_graph``.
CustomBackward = Callable[[list[Any], list[Any], bool], Sequence[Any]]


class OutputRef:
    """A saved handle to output ``index`` of a custom call."""

    __slots__ = ("value", "node")

    def __init__(self, value: Any, node: Node | None):
        self.value = value
        self.node = None if node is None else weakref.ref(node)


class _Collected:
    """The gradients of a function node's outputs during one backward."""

    __slots__ = ("grads", "count")

    def __init__(self, n_outputs: int):
        self.grads: list[Any] = [None] * n_outputs
        self.count = 0


def _output_step(ops: Any, g: Any, saved: Any, ctx: tuple[_Collected, int]) -> tuple:
    collected, index = ctx
    collected.grads[index] = g
    collected.count += 1
    return (g,) if collected.count == 1 else (None,)  # one token makes the function node run


def _function_step(ops: Any, token: Any, saved: tuple, ctx: tuple[_Collected, CustomBackward]) -> Sequence[Any]:
    collected, backward = ctx
    create_graph = type(token) is AutodiffTensor  # a create_graph pass hands tracked primitives
    grads = collected.grads
    collected.grads, collected.count = [None] * len(grads), 0  # ready for another (retained) pass
    values = [_resolve(h, create_graph) for h in saved]
    return backward(grads, values, create_graph)


def _resolve(handle: Any, create_graph: bool) -> Any:
    if type(handle) is not OutputRef:
        return handle  # the engine already gave plain (first order) or tracked values
    if not create_graph:
        return handle.value
    node = None if handle.node is None else handle.node()
    return AutodiffTensor(handle.value, node)


class CustomRules(RecordMixin):
    """Recording of a user-defined backward."""

    def custom(
        self,
        inputs: Sequence[AutodiffTensor | None],
        outputs: Sequence[tuple[Any, bool]],
        saved: Sequence[AutodiffTensor | int | None],
        backward: CustomBackward,
    ) -> list[AutodiffTensor]:
        """Records one call of a custom function.

        ``inputs``: the call's arguments (``None`` for a non-tensor one); ``outputs``:
        ``(inner primitive, differentiable)`` per output; ``saved``: per saved value
        an input or constant (an autodiff primitive), the index of an output, or
        ``None``. Returns the outputs as primitives of this backend (tracked where
        differentiable and some input is tracked)."""
        parents = tuple(None if x is None else x.node for x in inputs)
        if all(p is None for p in parents) or not any(d for _, d in outputs):
            return [AutodiffTensor(out, None) for out, _ in outputs]
        collected = _Collected(len(outputs))
        function = Node(self._next_id(), parents, _function_step, (), (collected, backward))
        results = []
        for index, (out, differentiable) in enumerate(outputs):
            if differentiable:
                results.append(self._record(out, (function,), _output_step, (), (collected, index)))
            else:
                results.append(AutodiffTensor(out, None))
        handles: list[Any] = []
        for h in saved:
            if isinstance(h, int):
                handles.append(OutputRef(results[h].inner, results[h].node))
            else:
                handles.append(h)
        function.saved = tuple(handles)
        return results
