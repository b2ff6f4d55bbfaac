"""``GradientsParams``: gradients keyed by ``ParamId`` instead of graph node id."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from ember.capture import register_pytree_node
from ember.device import Device
from ember.errors import GraphError
from ember.module import Module, ModuleVisitor, Param, ParamId
from ember.tensor import Tensor


class _FromGrads(ModuleVisitor):
    """Moves each parameter's gradient out of ``Gradients`` into ``GradientsParams``."""

    def __init__(self, grads: Any, out: GradientsParams, only: frozenset[ParamId] | None):
        self.grads = grads
        self.out = out
        self.only = only
        self.missed: list[tuple[int, ...]] = []  # shapes of tracked parameters without a gradient

    def visit_float(self, param: Param, path: str) -> None:
        if self.only is not None and param.id not in self.only:
            return
        value = param._value
        if value is None or not param.require_grad or value._device._inner is None:
            return  # lazy (not initialised), frozen, or not on an autodiff device
        grad = value.grad_remove(self.grads)  # None for an untracked value
        if grad is not None:
            self.out._grads[param.id] = grad
            self.out._sources[param.id] = (param, path)
        else:
            self.missed.append(param._shape)


def _check_other_instance(grads: Any, module: Module, missed: list[tuple[int, ...]]) -> None:
    """No parameter of ``module`` got a gradient although the graph holds gradients of
    tensors shaped like all of them: the loss came from another instance of the model
    (same architecture and ParamIds, other graph leaves)."""
    node_ids = getattr(grads, "node_ids", None)
    if node_ids is None:
        return
    others = Counter(tuple(getattr(grads.get(node), "shape", ())) for node in node_ids())
    if Counter(missed) - others:
        return  # the graph does not hold the model's shapes: another model, or no model, made the loss
    raise GraphError(
        f"ember: GradientsParams.from_grads: none of the {len(missed)} trainable parameters of "
        f"{type(module).__name__} is in this backward graph, which holds gradients of {len(others)} other tensors "
        "with their shapes: the loss was most likely computed with another instance of the model, e.g. the one "
        "from before `model = optim.step(...)` (a step returns a new model: compute the next loss with it), or a "
        "copy (clone, fork, load_file). Pass the model whose forward produced the loss"
    )


class _FindParams(ModuleVisitor):
    """Finds the parameters (and paths) of the given ids."""

    def __init__(self, ids: set[ParamId], out: dict[ParamId, tuple[Param, str]]):
        self.ids = ids
        self.out = out

    def visit_float(self, param: Param, path: str) -> None:
        if param.id in self.ids:
            self.out[param.id] = (param, path)


class GradientsParams:
    """Gradients of a model's parameters, keyed by :class:`ParamId` (Burn's
    ``GradientsParams``). Values are tensors on the inner (non-autodiff) device, or
    tracked tensors on the autodiff device when they come from
    ``backward(create_graph=True)`` (an optimizer step reads their values).

    >>> grads = GradientsParams.from_grads(loss.backward(), model)  # doctest: +SKIP
    """

    __slots__ = ("_grads", "_sources")

    def __init__(self) -> None:
        self._grads: dict[ParamId, Tensor] = {}
        # The parameter and path each gradient came from (set by from_grads), so that
        # an optimizer step need not walk the module again to find them.
        self._sources: dict[ParamId, tuple[Param, str]] = {}

    @staticmethod
    def from_grads(grads: Any, module: Module, filter: Iterable[ParamId] | None = None) -> GradientsParams:
        """Walks ``module`` and moves each tracked parameter's gradient out of
        ``grads`` (``loss.backward()``'s result). Parameters that are untracked, frozen
        or have no gradient are skipped; ``filter`` keeps only the given ids."""
        if not isinstance(module, Module):
            raise GraphError(f"ember: GradientsParams.from_grads: expected a Module, got {type(module).__name__}")
        out = GradientsParams()
        visitor = _FromGrads(grads, out, None if filter is None else frozenset(filter))
        module.visit(visitor)
        if not out._grads and visitor.missed:
            _check_other_instance(grads, module, visitor.missed)
        return out

    @staticmethod
    def from_params(grads: Any, module: Module, params: Iterable[ParamId]) -> GradientsParams:
        """Only the gradients of ``params`` (Burn's ``GradientsParams::from_params``: the
        same as ``from_grads(grads, module, filter=params)``)."""
        return GradientsParams.from_grads(grads, module, filter=params)

    @staticmethod
    def from_module(grads: Any, module: Module) -> GradientsParams:
        """The gradients of ``module``'s parameters: Burn's ``from_module``, kept for code
        ported from Burn; :meth:`from_grads` is the same call."""
        return GradientsParams.from_grads(grads, module)

    def entries(self, module: Module) -> list[tuple[Param, str, Tensor]]:
        """``(param, path, grad)`` for each gradient of a parameter of ``module``, in
        gradient order. The parameters ``from_grads`` found are remembered (no walk);
        gradients registered by id alone are matched by one walk of ``module``, and
        ids that are not parameters of ``module`` are left out."""
        sources = self._sources
        if len(sources) < len(self._grads):
            sources = dict(sources)
            module.visit(_FindParams(set(self._grads) - set(sources), sources))
        return [sources[pid] + (grad,) for pid, grad in self._grads.items() if pid in sources]

    def get(self, param_id: ParamId) -> Tensor | None:
        return self._grads.get(param_id)

    def remove(self, param_id: ParamId) -> Tensor | None:
        self._sources.pop(param_id, None)
        return self._grads.pop(param_id, None)

    def register(self, param_id: ParamId, grad: Tensor) -> None:
        """Sets (replaces) the gradient of ``param_id``."""
        if not isinstance(grad, Tensor):
            raise GraphError(f"ember: GradientsParams.register: expected a Tensor, got {type(grad).__name__}")
        self._grads[param_id] = grad
        self._sources.pop(param_id, None)

    def len(self) -> int:
        """The number of gradients (Burn's ``len``; ``len(grads)`` is the same)."""
        return len(self._grads)

    def __len__(self) -> int:
        return len(self._grads)

    def is_empty(self) -> bool:
        return not self._grads

    def ids(self) -> list[ParamId]:
        return list(self._grads)

    def items(self) -> Iterator[tuple[ParamId, Tensor]]:
        return iter(list(self._grads.items()))

    def __contains__(self, param_id: object) -> bool:
        return param_id in self._grads

    def to_device(self, device: Device) -> GradientsParams:
        out = GradientsParams()
        for pid, g in self._grads.items():
            out._grads[pid] = g.to_device(device)
        out._sources = dict(self._sources)
        return out

    def __repr__(self) -> str:
        return f"GradientsParams({len(self._grads)} tensors)"


class GradientsAccumulator:
    """Sums ``GradientsParams`` over several batches (gradient accumulation).

    >>> acc = GradientsAccumulator()
    >>> acc.accumulate(model, grads)  # doctest: +SKIP
    >>> model = optim.step(lr, model, acc.grads())  # doctest: +SKIP
    """

    def __init__(self) -> None:
        self._sum = GradientsParams()
        self.count = 0

    def accumulate(self, module: Module | None, grads: GradientsParams) -> None:
        for pid, g in grads.items():
            prev = self._sum.get(pid)
            self._sum.register(pid, g if prev is None else prev.add(g))
        self.count += 1

    def grads(self) -> GradientsParams:
        """The summed gradients; the accumulator starts over."""
        out, self._sum, self.count = self._sum, GradientsParams(), 0
        return out


def _flatten_grads(grads: GradientsParams) -> tuple[tuple[Tensor, ...], tuple[ParamId, ...]]:
    return tuple(grads._grads.values()), tuple(grads._grads)


def _unflatten_grads(ids: tuple[ParamId, ...], values: tuple[Tensor, ...]) -> GradientsParams:
    # The parameters from_grads remembered are the traced ones: an optimizer step finds
    # the module's own by id (one walk).
    out = GradientsParams()
    out._grads = dict(zip(ids, values))
    return out


# A compiled step may take or return gradients: their tensors are traced values.
register_pytree_node(GradientsParams, _flatten_grads, _unflatten_grads)
