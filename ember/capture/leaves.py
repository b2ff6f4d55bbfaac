"""The leaves of a compiled function's arguments as the trace and the replays see
them: a module's parameters and running states (walked once per module), a tensor's
primitive under any autodiff wrapper, and the guard keys of tensors and modules."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from ember.device import Device
from ember.module import Module, Param, RunningState
from ember.module.visitor import ParamCollector
from ember.tensor import Tensor


def module_leaves(module: Module) -> tuple[list[Param], list[RunningState]]:
    """The parameters and running states of ``module``, in visit order. A walk of the
    module tree costs a Python call per field (about a millisecond for a small
    transformer): the last few modules' results are kept, by identity (a built module
    is a value: its fields cannot be assigned), so a compiled function called with a
    module it does not return (a decode step's model) walks it once, not per call. A
    list field changed in place is not seen: build a new module (``replace``, ``map``)
    instead, as optimizers do."""
    for i, (ref, found) in enumerate(LEAVES):
        if ref() is module:
            if i:
                LEAVES.insert(0, LEAVES.pop(i))
            return found
    collector = ParamCollector(states=True)
    module.visit(collector)
    params = [p for _, p in collector.items if isinstance(p, Param)]
    states = [s for _, s in collector.items if isinstance(s, RunningState)]
    found = (params, states)
    LEAVES.insert(0, (weakref.ref(module), found))
    del LEAVES[LEAVES_KEPT:]
    return found


#: Modules whose leaves are kept (see :func:`module_leaves`): (module, (params,
#: states)), most recent first.
LEAVES: list[tuple[weakref.ref, tuple[list[Param], list[RunningState]]]] = []
LEAVES_KEPT = 4


def innermost(tensor: Tensor) -> Any:
    """The primitive of the device that runs kernels, under any autodiff wrapper."""
    device = tensor._device
    # An autodiff device's backend is an AutodiffProtocol (cast() would be a call per input).
    return device._backend.unwrap(tensor._primitive) if device.is_autodiff() else tensor._primitive  # type: ignore[attr-defined]


def tensor_key(t: Tensor) -> tuple:
    """A tensor argument's part of the guard key: shape, dtype, device, tracked or not."""
    p = t._primitive
    d = t._device
    # An autodiff device's backend is an AutodiffProtocol (cast() would be a call per argument).
    tracked = d.is_autodiff() and d._backend.is_tracked(p)  # type: ignore[attr-defined]
    return (tuple(p.shape), p.dtype.str, d, tracked)


class ModuleKey:
    """A module's part of a guard key, hashed once: a transformer's key holds a tuple
    per parameter, and a compiled call looks its whole key up in a dict."""

    __slots__ = ("value", "_hash")

    def __init__(self, value: tuple) -> None:
        self.value = value
        self._hash = hash(value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (type(other) is ModuleKey and self._hash == other._hash and self.value == other.value)


def module_key(module: Module) -> ModuleKey:
    """A module argument's part of the guard key: its class and its leaves' ids,
    shapes, dtypes and devices."""
    params, states = module_leaves(module)
    return ModuleKey(
        (
            type(module),
            tuple((p.id, p._shape, p.dtype, p.device, p.require_grad) for p in params),
            tuple(
                (s.id, tuple(s.value()._primitive.shape), s.value()._primitive.dtype.str, s.value()._device)
                for s in states
            ),
        )
    )


def tensor_on(array: Any, device: Device, wrap: Callable[[Any], Any] | None = None) -> Tensor:
    """A tensor of ``device`` holding ``array`` (a plan's output; wrapped by ``wrap``,
    a fusion device's ``_wrap``, first)."""
    if wrap is not None:
        array = wrap(array)
    if device.is_autodiff():
        # An autodiff device's backend is an AutodiffProtocol (cast() would be a call per output).
        return Tensor(device._backend.wrap(array), device)  # type: ignore[attr-defined]
    return Tensor(array, device)


def devices(leaves: list[Any]) -> list[Device]:
    """The devices (autodiff unwrapped) the tensors and modules among ``leaves`` live on."""
    found: list[Device] = []
    for leaf in leaves:
        if isinstance(leaf, Tensor):
            candidates = [leaf._device]
        elif isinstance(leaf, Module):
            candidates = [p.device for p in module_leaves(leaf)[0]]
        else:
            continue
        for d in candidates:
            inner = d.inner()
            if inner not in found:
                found.append(inner)
    return found
