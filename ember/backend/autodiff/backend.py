"""``autodiff``: reverse-mode differentiation as a decorator around any backend."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.backend.autodiff.checkpoint import Checkpointing
from ember.backend.autodiff.grad_hooks import RemovableHandle, add_hook, run_hooks
from ember.backend.autodiff.graph import SELF, AutodiffTensor, Gradients, Node, Own, topological_order
from ember.backend.autodiff.hooks import current_hook
from ember.backend.autodiff.rules.activation import ActivationRules
from ember.backend.autodiff.rules.attention import AttentionRules
from ember.backend.autodiff.rules.custom import CustomRules
from ember.backend.autodiff.rules.decompositions import DecompositionRules
from ember.backend.autodiff.rules.elementwise import ElementwiseRules
from ember.backend.autodiff.rules.grid_sample import GridSampleRules
from ember.backend.autodiff.rules.indexing import IndexingRules
from ember.backend.autodiff.rules.layout import LayoutRules
from ember.backend.autodiff.rules.linalg import LinalgRules
from ember.backend.autodiff.rules.loss import LossRules
from ember.backend.autodiff.rules.module import ModuleRules
from ember.backend.autodiff.rules.norm import NormRules
from ember.backend.autodiff.rules.reduce import ReduceRules
from ember.backend.autodiff.rules.rnn import RnnRules
from ember.backend.autodiff.rules.spectral import SpectralRules
from ember.backend.base import Backend
from ember.backend.dtype import NUMPY_TO_DTYPE
from ember.backend.ops import BinaryOp
from ember.errors import GraphError


class AutodiffBackend(
    ElementwiseRules,
    ReduceRules,
    LayoutRules,
    IndexingRules,
    LinalgRules,
    DecompositionRules,
    ActivationRules,
    AttentionRules,
    GridSampleRules,
    LossRules,
    NormRules,
    RnnRules,
    ModuleRules,
    CustomRules,
    SpectralRules,
    Backend,
):
    """Wraps ``inner``: every op runs on the inner backend and, when an input is
    tracked, records a node whose step computes the inputs' gradients."""

    def __init__(self, inner: Backend, checkpointing: Checkpointing = Checkpointing.DISABLED):
        self.inner = inner
        self.checkpointing = checkpointing
        self._balanced = checkpointing is Checkpointing.BALANCED
        self._next_id = itertools.count(1).__next__
        self.name = f"autodiff<{inner.name}>"

    # ------------------------------------------------------------------ wrapping
    def wrap(self, inner: Any) -> AutodiffTensor:
        """An untracked primitive of this backend around an inner primitive."""
        return AutodiffTensor(inner, None)

    def unwrap(self, x: AutodiffTensor) -> Any:
        return x.inner

    def move_from(self, x: AutodiffTensor, source: AutodiffBackend) -> AutodiffTensor:
        """``x`` from another autodiff backend; gradients flow back across the move."""
        array = np.ascontiguousarray(source.inner.to_numpy(x.inner))
        out = self.inner.from_numpy(array)
        if x.node is None:
            return AutodiffTensor(out, None)
        return self._record(out, (x.node,), _move_step, (), source.inner)

    # ------------------------------------------------------------------ tracking
    def set_require_grad(self, x: AutodiffTensor, require_grad: bool) -> AutodiffTensor:
        if not require_grad:
            return AutodiffTensor(x.inner, None)
        if x.node is not None and not x.node.consumed:
            return x
        return self.leaf(x.inner)

    def leaf(self, inner: Any) -> AutodiffTensor:
        """A new leaf that requires grad, around an inner primitive."""
        return AutodiffTensor(inner, Node(self._next_id(), (), None, (), None))

    def is_tracked(self, x: AutodiffTensor) -> bool:
        return x.node is not None

    def detach(self, x: AutodiffTensor) -> AutodiffTensor:
        return AutodiffTensor(x.inner, None)

    # ------------------------------------------------------------------ backward
    def backward(
        self,
        root: AutodiffTensor,
        grad: AutodiffTensor | None = None,
        *,
        create_graph: bool = False,
        retain_graph: bool | None = None,
        inputs: Sequence[AutodiffTensor] | None = None,
    ) -> Gradients:
        """Gradients of ``root`` for every leaf that requires grad.

        ``grad`` seeds the pass (default: ones of ``root``'s shape). With
        ``create_graph`` the backward steps run on this backend itself, so the
        gradients are tracked tensors whose own gradients another backward can take
        (any order); the graph is then retained. ``retain_graph`` keeps the graph for
        another backward (default: ``create_graph``). ``inputs`` restricts the pass
        to the gradients of these tensors (leaves or not), running only the steps
        on a path to them; the graph below them is left as it was.
        """
        node = root.node
        if node is None:
            raise GraphError(
                "ember: backward: the tensor does not require grad, so there is nothing to "
                "differentiate; mark inputs with .require_grad() (module parameters are) and "
                "build them on an autodiff device"
            )
        retain = create_graph if retain_graph is None else bool(retain_graph)
        ops = self if create_graph else self.inner
        if grad is None:
            seed = ops.full(root.shape, 1, NUMPY_TO_DTYPE[root.dtype])
        else:
            seed = grad if create_graph else grad.inner
        grads = Gradients(create_graph)
        leaf_grads = grads._grads
        wanted = None if inputs is None else {x.node.id for x in inputs if x.node is not None}
        # A data-parallel gradient hook (first-order passes over the whole graph only).
        hook = current_hook() if (inputs is None and not create_graph and not retain) else None
        if node.step is None and not node.consumed:  # the root is itself a leaf
            if wanted is None or node.id in wanted:
                if node.hooks:
                    seed = run_hooks(node, seed, create_graph)
                leaf_grads[node.id] = seed
                if hook is not None:
                    hook(node.id, seed)
            return grads
        hooked: list[Node] = []  # the leaves with gradient hooks
        order = topological_order(node, hooked)
        if hook is not None:
            return self._backward_hooked(node, order, seed, grads, hook)
        if wanted is None and not create_graph and not self._balanced:
            _backward_first_order(ops, node, order, seed, grads, retain)
            return _leaf_hooks(hooked, grads) if hooked else grads
        # ``reaches`` is set exactly when ``wanted`` is; the loop reads ``wanted_ids`` only
        # after a ``reaches is not None`` check.
        reaches: set[int] | None = None
        wanted_ids: set[int] = set()
        if wanted is not None:
            wanted_ids = wanted
            reaches = _reaching(order, wanted)
        pending: dict[int, Any] = {node.id: seed}
        balanced = self._balanced
        recomputed: dict[int, Any] = {}
        pop = pending.pop
        for n in order:
            nid = n.id
            g = pop(nid, None)
            if g is not None:
                if n.hooks:
                    g = run_hooks(n, g, create_graph)
                if reaches is not None and nid in wanted_ids:
                    leaf_grads[nid] = g  # a wanted tensor inside the graph: its gradient is complete
                if reaches is None or nid in reaches:
                    parent_grads = n.step(ops, g, _saved(n, recomputed, balanced, create_graph), n.ctx)
                    if balanced:
                        recomputed.pop(nid, None)
                    parents = n.parents
                    for i in range(len(parents)):
                        parent = parents[i]
                        pg = parent_grads[i]
                        if parent is None or pg is None:
                            continue
                        pid = parent.id
                        if parent.step is None:
                            if wanted is not None and pid not in wanted:
                                continue
                            target = leaf_grads
                        else:
                            if reaches is not None and pid not in reaches and pid not in wanted_ids:
                                continue
                            target = pending
                        prev = target.get(pid)
                        target[pid] = pg if prev is None else ops.binary(BinaryOp.ADD, prev, pg)
            if not retain and (reaches is None or nid in reaches):
                # Release what backward needed; the node stays as a marker of a used graph.
                # (With ``inputs``, nodes whose steps did not run stay usable.)
                n.step = n.saved = n.ctx = n.recompute = None
                n.parents = ()
                n.consumed = True
        return _leaf_hooks(hooked, grads) if hooked else grads

    def _backward_hooked(self, node: Node, order: list[Node], seed: Any, grads: Gradients, hook: Any) -> Gradients:
        """``backward`` that calls ``hook(leaf id, grad)`` once each leaf's gradient is
        final: it counts each leaf's uses in the graph and fires on the last one."""
        ops = self.inner
        leaf_grads = grads._grads
        uses: dict[int, int] = {}
        for n in order:
            for parent in n.parents:
                if parent is not None and parent.step is None and not parent.consumed:
                    uses[parent.id] = uses.get(parent.id, 0) + 1
        pending: dict[int, Any] = {node.id: seed}
        balanced = self._balanced
        recomputed: dict[int, Any] = {}
        for n in order:
            nid = n.id
            g = pending.pop(nid, None)
            parents = n.parents
            parent_grads = None
            if g is not None:
                if n.hooks:
                    g = run_hooks(n, g, False)
                parent_grads = n.step(ops, g, _saved(n, recomputed, balanced, False), n.ctx)
                if balanced:
                    recomputed.pop(nid, None)
            for i in range(len(parents)):
                parent = parents[i]
                if parent is None:
                    continue
                pid = parent.id
                is_leaf = parent.step is None and not parent.consumed
                pg = None if parent_grads is None else parent_grads[i]
                if pg is not None:
                    target = leaf_grads if is_leaf else pending
                    prev = target.get(pid)
                    target[pid] = pg if prev is None else ops.binary(BinaryOp.ADD, prev, pg)
                if is_leaf:
                    left = uses[pid] - 1
                    uses[pid] = left
                    if left == 0 and pid in leaf_grads:
                        if parent.hooks:
                            leaf_grads[pid] = run_hooks(parent, leaf_grads[pid], False)
                        hook(pid, leaf_grads[pid])
            n.step = n.saved = n.ctx = n.recompute = None
            n.parents = ()
            n.consumed = True
        return grads

    def register_hook(self, x: AutodiffTensor, hook: Any) -> RemovableHandle:
        """Calls ``hook(grad, create_graph)`` with ``x``'s complete gradient in each
        backward through it; a non-``None`` result replaces the gradient."""
        if x.node is None:
            raise GraphError(
                "ember: register_hook: the tensor does not require grad, so no gradient reaches it; "
                "hook a tensor computed from (or marked with) .require_grad() on an autodiff device"
            )
        return add_hook(x.node, hook)

    def grad(self, x: AutodiffTensor, grads: Gradients) -> Any:
        return None if x.node is None else grads.get(x.node.id)

    def grad_remove(self, x: AutodiffTensor, grads: Gradients) -> Any:
        node = x.node
        return None if node is None else grads._grads.pop(node.id, None)

    def grad_replace(self, x: AutodiffTensor, grads: Gradients, grad: Any) -> None:
        if x.node is None:
            raise GraphError("ember: grad_replace: the tensor is not tracked, so it has no gradient slot")
        grads.register(x.node.id, grad)

    # ------------------------------------------------------------------ passthrough
    def from_numpy(self, array: np.ndarray) -> AutodiffTensor:
        return AutodiffTensor(self.inner.from_numpy(array), None)

    def to_numpy(self, x: AutodiffTensor) -> np.ndarray:
        return self.inner.to_numpy(x.inner)

    def full(self, shape, value, dtype) -> AutodiffTensor:
        return AutodiffTensor(self.inner.full(shape, value, dtype), None)

    def arange(self, start, stop, step, dtype) -> AutodiffTensor:
        return AutodiffTensor(self.inner.arange(start, stop, step, dtype), None)

    def random(self, shape, distribution, dtype, key, counter) -> AutodiffTensor:
        return AutodiffTensor(self.inner.random(shape, distribution, dtype, key, counter), None)

    def sync(self) -> None:
        self.inner.sync()


def _backward_first_order(
    ops: Any, node: Node, order: list[Node], seed: Any, grads: Gradients, retain: bool
) -> Gradients:
    """``backward``'s loop for the common pass (first order, every leaf, no
    recomputation): the same steps without the checks the other passes need."""
    leaf_grads = grads._grads
    pending: dict[int, Any] = {node.id: seed}
    pop = pending.pop
    add = BinaryOp.ADD
    tracked = AutodiffTensor
    for n in order:
        g = pop(n.id, None)
        if g is not None:
            if n.hooks:
                g = run_hooks(n, g, False)
            saved = n.saved
            if saved:  # plain inner values, as _saved gives them (one and two handles unrolled:
                # the common cases, without a comprehension's frame)
                count = len(saved)
                if count == 2:
                    a, b = saved
                    ta, tb = type(a), type(b)
                    saved = (
                        a.inner if ta is tracked else (a.value if ta is Own else a),
                        b.inner if tb is tracked else (b.value if tb is Own else b),
                    )
                elif count == 1:
                    a = saved[0]
                    ta = type(a)
                    saved = (a.inner if ta is tracked else (a.value if ta is Own else a),)
                else:
                    saved = tuple(
                        [h.inner if type(h) is tracked else (h.value if type(h) is Own else h) for h in saved]
                    )
            parent_grads = n.step(ops, g, saved, n.ctx)
            parents = n.parents
            for i in range(len(parents)):
                parent = parents[i]
                pg = parent_grads[i]
                if parent is None or pg is None:
                    continue
                pid = parent.id
                target = leaf_grads if parent.step is None else pending
                prev = target.get(pid)
                target[pid] = pg if prev is None else ops.binary(add, prev, pg)
        if not retain:  # release what backward needed; the node stays as a marker of a used graph
            n.step = n.saved = n.ctx = n.recompute = None
            n.parents = ()
            n.consumed = True
    return grads


def _leaf_hooks(hooked: list[Node], grads: Gradients) -> Gradients:
    """Runs the gradient hooks of the leaves in ``hooked`` on their final gradients."""
    leaf_grads = grads._grads
    for leaf in hooked:
        g = leaf_grads.get(leaf.id)
        if g is not None and leaf.hooks:
            leaf_grads[leaf.id] = run_hooks(leaf, g, grads.create_graph)
    return grads


def _move_step(ops, g, saved, source):
    if isinstance(ops, AutodiffBackend):
        raise GraphError(
            "ember: backward(create_graph=True): the graph holds a move between devices "
            "(to_device), whose gradient cannot be differentiated again; move the tensors "
            "before the tracked computation starts"
        )
    return (source.from_numpy(np.ascontiguousarray(ops.to_numpy(g))),)


def _reaching(order: list[Node], wanted: set[int]) -> set[int]:
    """The ids of the nodes of ``order`` with a path to a wanted node below them (their
    steps must run); ``order`` lists children before parents."""
    reaches: set[int] = set()
    for n in reversed(order):
        for parent in n.parents:
            if parent is not None and (parent.id in wanted or parent.id in reaches):
                reaches.add(n.id)
                break
    return reaches


def _plain(value: Any) -> Any:
    kind = type(value)
    if kind is AutodiffTensor:
        return value.inner
    if kind is Own:
        return value.value
    return value


def _saved(n: Node, cache: dict[int, Any], balanced: bool, create_graph: bool) -> tuple | None:
    """The values a node's step reads: plain inner primitives for a first-order pass;
    autodiff tensors that remember their nodes for a ``create_graph`` pass."""
    saved = n.saved
    if not saved:
        return saved
    if create_graph:
        return tuple([_lift(n, h, cache) for h in saved])
    if balanced:
        return tuple([_resolve(n, h, cache) for h in saved])
    return tuple([h.inner if type(h) is AutodiffTensor else (h.value if type(h) is Own else h) for h in saved])


def _lift(node: Node, handle: Any, cache: dict[int, Any]) -> Any:
    """A saved handle as a tracked value of this graph (for ``create_graph``)."""
    kind = type(handle)
    if kind is AutodiffTensor:
        return handle
    if kind is Own:
        return AutodiffTensor(handle.value, node)
    if handle is SELF:
        return AutodiffTensor(_resolve(node, SELF, cache), node)
    if kind is Node:
        return AutodiffTensor(_resolve(node, handle, cache), handle)
    return handle


def _resolve(node: Node, handle: Any, cache: dict[int, Any]) -> Any:
    """The value behind a saved handle, recomputing memory-bound outputs (iteratively)."""
    if handle is SELF:
        handle = node
    elif type(handle) is not Node:
        return _plain(handle)
    if handle.id in cache:
        return cache[handle.id]
    stack = [handle]
    while stack:
        current = stack[-1]
        if current.id in cache:
            stack.pop()
            continue
        fn, inputs = current.recompute
        missing = [h for h in inputs if type(h) is Node and h.id not in cache]
        if missing:
            stack.extend(missing)
            continue
        cache[current.id] = fn(*(cache[h.id] if type(h) is Node else _plain(h) for h in inputs))
        stack.pop()
    return cache[handle.id]


if TYPE_CHECKING:
    from ember.backend.autodiff.protocol import AutodiffProtocol

    def _satisfies_protocol(backend: AutodiffBackend) -> AutodiffProtocol:
        return backend  # mypy: AutodiffBackend implements every entry point of the protocol
