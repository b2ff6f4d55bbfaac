"""``once_differentiable``: a backward that is not itself differentiable (PyTorch's
``torch.autograd.function.once_differentiable``), for a backward that leaves tensor
ops (reads values, calls numpy) or whose derivative is not worth writing.

In a ``backward(create_graph=True)`` pass the decorated backward runs on untracked
values, and its results are tied to the gradients and saved tensors it read by a node
whose own backward raises: differentiating again is an error naming the function,
never a silently wrong (zero) second derivative.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ember.autograd.function import Function, FunctionCtx
from ember.errors import GraphError
from ember.tensor import Tensor


class _Once(Function):
    @staticmethod
    def forward(ctx: FunctionCtx, value: Tensor, name: str, *reads: Tensor) -> Tensor:
        ctx.function_name = name
        return value

    @staticmethod
    def backward(ctx: FunctionCtx, *grads: Any) -> Any:
        raise GraphError(
            f"ember: {ctx.function_name}.backward is once_differentiable: its result cannot be differentiated "
            "again; write it with tensor ops (and drop the decorator) for higher-order gradients"
        )


def once_differentiable(backward: Callable[..., Any]) -> Callable[..., Any]:
    """Decorates a :class:`~ember.autograd.Function`'s ``backward`` (under
    ``@staticmethod``): it may use any computation, and a double backward through it
    raises a ``GraphError``.

    >>> from ember.autograd import Function, once_differentiable
    >>> class Sign(Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         return x.sign()
    ...     @staticmethod
    ...     @once_differentiable
    ...     def backward(ctx, g):
    ...         return g.clamp(-1.0, 1.0)
    """

    @functools.wraps(backward)
    def wrapper(ctx: FunctionCtx, *grads: Any) -> Any:
        saved = ctx._saved or ()
        reads = [t for t in (*grads, *saved) if isinstance(t, Tensor) and t.is_require_grad()]
        if not reads:
            return backward(ctx, *grads)
        ctx._saved = tuple(None if t is None else t.detach() for t in saved)
        try:
            result = backward(ctx, *(g.detach() if isinstance(g, Tensor) else g for g in grads))
        finally:
            ctx._saved = saved
        name = ctx._function_name
        if isinstance(result, Tensor):
            return _Once.apply(result, name, *reads)
        if isinstance(result, (tuple, list)):
            return tuple(_Once.apply(r, name, *reads) if isinstance(r, Tensor) else r for r in result)
        return result

    return wrapper
