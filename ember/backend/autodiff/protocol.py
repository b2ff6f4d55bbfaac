"""The entry points an autodiff backend adds to the :class:`~ember.backend.Backend` ops.

``Tensor``, ``Param`` and the layers above call these on the backend of an autodiff
device (``device.is_autodiff()``): moving primitives in and out of the graph, making
leaves, and reading gradients. They are not part of the ``Backend`` ABC (a plain
backend has no graph); this protocol types them. ``AutodiffBackend`` satisfies it
(checked by mypy in ``ember/backend/autodiff/backend.py``); a caller that knows its
device is an autodiff one writes ``cast("AutodiffProtocol", device._backend)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ember.backend.autodiff.checkpoint import Checkpointing
    from ember.backend.autodiff.grad_hooks import GradHook, RemovableHandle
    from ember.backend.autodiff.graph import Gradients
    from ember.backend.autodiff.rules.custom import CustomBackward
    from ember.backend.base import Backend

# A primitive of the autodiff backend (a tracked or untracked wrapper of an inner one).
Tracked = Any


class AutodiffProtocol(Protocol):
    """What an autodiff backend offers beyond the primitive ops."""

    inner: Backend
    checkpointing: Checkpointing

    def wrap(self, inner: Any) -> Tracked:
        """An untracked primitive of this backend around an inner primitive."""
        ...

    def unwrap(self, x: Tracked) -> Any:
        """The inner primitive (cut from the graph)."""
        ...

    def leaf(self, inner: Any) -> Tracked:
        """A new leaf that requires grad, around an inner primitive."""
        ...

    def move_from(self, x: Tracked, source: Any) -> Tracked:
        """``x`` from another autodiff backend ``source``; gradients flow back across the move."""
        ...

    def set_require_grad(self, x: Tracked, require_grad: bool) -> Tracked: ...

    def is_tracked(self, x: Tracked) -> bool: ...

    def detach(self, x: Tracked) -> Tracked: ...

    def backward(
        self,
        root: Tracked,
        grad: Tracked | None = None,
        *,
        create_graph: bool = False,
        retain_graph: bool | None = None,
        inputs: Sequence[Tracked] | None = None,
    ) -> Gradients: ...

    def grad(self, x: Tracked, grads: Gradients) -> Any: ...

    def grad_remove(self, x: Tracked, grads: Gradients) -> Any: ...

    def grad_replace(self, x: Tracked, grads: Gradients, grad: Any) -> None: ...

    def register_hook(self, x: Tracked, hook: GradHook) -> RemovableHandle:
        """Calls ``hook(grad, create_graph)`` with ``x``'s complete gradient in each backward."""
        ...

    def custom(
        self,
        inputs: Sequence[Tracked | None],
        outputs: Sequence[tuple[Any, bool]],
        saved: Sequence[Tracked | int | None],
        backward: CustomBackward,
    ) -> list[Tracked]:
        """Records a call of a user-defined function whose backward is ``backward``."""
        ...
