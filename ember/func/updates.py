"""Applying gradients to a module without cutting the graph (meta-learning)."""

from __future__ import annotations

from collections.abc import Callable

from ember.errors import ConfigError
from ember.module import Module, ModuleMapper, Param
from ember.optim import GradientsParams
from ember.tensor import Tensor


class _Apply(ModuleMapper):
    def __init__(self, updates: GradientsParams, fn: Callable[[Tensor, Tensor], Tensor]):
        self.updates = updates
        self.fn = fn

    def map_float(self, param: Param, path: str) -> Param:
        update = self.updates.get(param.id)
        if update is None:
            return param
        value = param.val()
        if update._device is not value._device:
            update = update.to_device(value._device)
        return Param.from_tracked_value(param.id, self.fn(value, update), param.require_grad)


def apply_updates(
    module: Module, updates: GradientsParams, fn: Callable[[Tensor, Tensor], Tensor] | None = None
) -> Module:
    """``module`` with each parameter ``p`` that has an entry ``u`` in ``updates``
    replaced by ``fn(p, u)`` (default ``p + u``), ids kept and the graph kept: a loss of
    the new module is differentiable with respect to the old parameters and, when
    ``updates`` are tracked (``create_graph``), through them (MAML's inner step).

    >>> g = ember.func.grad(loss_fn, create_graph=True)(model, x, y)         # doctest: +SKIP
    >>> fast = apply_updates(model, g, lambda p, g: p - 0.1 * g)             # doctest: +SKIP
    >>> meta_loss = loss_fn(fast, x2, y2)                                    # doctest: +SKIP
    """
    if not isinstance(module, Module):
        raise ConfigError(f"ember: apply_updates: expected a Module, got {type(module).__name__}")
    if not isinstance(updates, GradientsParams):
        raise ConfigError(
            f"ember: apply_updates: updates must be a GradientsParams (e.g. from ember.func.grad), "
            f"got {type(updates).__name__}"
        )
    return module.map(_Apply(updates, fn or (lambda p, u: p.add(u))))
