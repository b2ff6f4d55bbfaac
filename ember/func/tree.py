"""The arguments a transform differentiates: tensors, modules and (nested) tuples,
lists and dicts of them.

:class:`Lifted` replaces each float tensor (and each float parameter that requires
grad) by a tracked tensor the function sees, remembers where its gradient goes back,
and assembles the gradients in the argument's shape: a tensor for a tensor, a
:class:`~ember.optim.GradientsParams` for a module, the same container for a container.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from ember.errors import DTypeError, GraphError
from ember.module import Module, ModuleMapper, Param
from ember.optim import GradientsParams
from ember.tensor import Tensor
from ember.tensor.checks import FLOAT_NP

if TYPE_CHECKING:
    from ember.backend.autodiff.protocol import AutodiffProtocol


class _Slot:
    """One differentiated tensor: what the function sees and where its gradient goes."""

    __slots__ = ("tensor", "home")

    def __init__(self, tensor: Tensor, home: Any):
        self.tensor = tensor  # tracked, on an autodiff device
        self.home = home  # the device the caller's tensor lives on


class _LiftParams(ModuleMapper):
    def __init__(self, lifted: Lifted, where: str):
        self.lifted = lifted
        self.where = where
        self.slots: list[tuple[Param, str, _Slot]] = []

    def map_float(self, param: Param, path: str) -> Param:
        if not param.require_grad:
            return param
        value = param.val()
        if not value._device.is_autodiff():
            raise GraphError(
                f"ember: {self.lifted.op}: the module of {self.where} lives on {value._device!r}, which has no "
                f"autodiff; build it on {value._device!r}.autodiff() (its parameters must be trackable)"
            )
        slot = self.lifted.slot(value, f"{self.where} ({path})")
        self.slots.append((param, path, slot))
        return Param.from_tracked_value(param.id, slot.tensor, True)


class Lifted:
    """The differentiated arguments of one call of a transform (see the module docstring)."""

    def __init__(self, op: str):
        self.op = op
        self.slots: list[_Slot] = []
        self._seen: set[int] = set()

    # ------------------------------------------------------------------ lifting
    def slot(self, x: Tensor, where: str) -> _Slot:
        """``x`` as a tracked tensor of its own: a new leaf when ``x`` is untracked (on a
        plain device: on that device's autodiff wrapper), ``x`` itself when it is tracked
        (so that an enclosing transform differentiates through it)."""
        if x._primitive.dtype not in FLOAT_NP:
            raise DTypeError(
                f"ember: {self.op}: {where} is a {x.dtype} tensor; only float tensors have gradients "
                "(cast it with .float(), or leave it out of argnums)"
            )
        home = x._device
        device = home if home.is_autodiff() else home.autodiff()
        backend = cast("AutodiffProtocol", device._backend)
        if home is not device:
            prim = backend.leaf(x._primitive)
        else:
            prim = x._primitive
            node = prim.node
            if node is None or node.consumed:
                prim = backend.leaf(backend.unwrap(prim))
            elif node.id in self._seen:  # the same tensor twice: each position gets its own gradient
                prim = device._backend.reshape(prim, prim.shape)
        self._seen.add(prim.node.id)
        slot = _Slot(Tensor(prim, device), home)
        self.slots.append(slot)
        return slot

    def lift(self, value: Any, where: str) -> tuple[Any, Any]:
        """``(the value the function sees, the spec that assembles its gradient)``."""
        if isinstance(value, Tensor):
            slot = self.slot(value, where)
            return slot.tensor, ("tensor", slot)
        if isinstance(value, Module):
            mapper = _LiftParams(self, where)
            return value.map(mapper), ("module", mapper.slots)
        if type(value) in (tuple, list):
            items = [self.lift(v, f"{where}[{i}]") for i, v in enumerate(value)]
            return type(value)(p[0] for p in items), (type(value), [p[1] for p in items])
        if type(value) is dict:
            entries = {k: self.lift(v, f"{where}[{k!r}]") for k, v in value.items()}
            return {k: p[0] for k, p in entries.items()}, (dict, {k: p[1] for k, p in entries.items()})
        raise GraphError(
            f"ember: {self.op}: {where} is a {type(value).__name__}; differentiated arguments must be "
            "Tensors, Modules or tuples/lists/dicts of them (leave other arguments out of argnums)"
        )

    def lifted_devices(self) -> dict[Any, Any]:
        """Plain devices whose tensors were lifted onto their autodiff wrappers."""
        return {s.home: s.tensor._device for s in self.slots if s.home is not s.tensor._device}

    def tensors(self) -> list[Tensor]:
        return [s.tensor for s in self.slots]

    # ------------------------------------------------------------------ gradients
    def gradient(self, spec: Any, grads: Any) -> Any:
        """The gradients in the shape of the argument ``spec`` came from; zeros where the
        function does not depend on an input."""
        kind, body = spec
        if kind == "tensor":
            return _grad_of(body, grads)
        if kind == "module":
            out = GradientsParams()
            for param, path, slot in body:
                g = _grad_of(slot, grads, module=True)
                out._grads[param.id] = g
                out._sources[param.id] = (param, path)
            return out
        if kind is dict:
            return {k: self.gradient(v, grads) for k, v in body.items()}
        return kind(self.gradient(v, grads) for v in body)


def follow(value: Any, moves: dict[Any, Any]) -> Any:
    """A non-differentiated argument with its tensors (and modules) on a lifted plain
    device moved, untracked, onto that device's autodiff wrapper, so that they meet the
    lifted arguments on one device."""
    if not moves:
        return value
    if isinstance(value, Tensor):
        target = moves.get(value._device)
        return value if target is None else value.to_device(target)
    if isinstance(value, Module):
        devices = value.devices()
        if len(devices) == 1 and devices[0] in moves:
            return value.to_device(moves[devices[0]]).no_grad()
        return value
    if type(value) in (tuple, list):
        return type(value)(follow(v, moves) for v in value)
    if type(value) is dict:
        return {k: follow(v, moves) for k, v in value.items()}
    return value


def _grad_of(slot: _Slot, grads: Any, module: bool = False) -> Tensor:
    """The gradient of one slot: tracked on the autodiff device for ``create_graph``
    passes; otherwise on the caller's device (the inner device for module parameters,
    as ``GradientsParams.from_grads`` gives them)."""
    t = slot.tensor
    device = t._device
    g = cast("AutodiffProtocol", device._backend).grad(t._primitive, grads)
    if grads.create_graph:
        if g is None:
            return Tensor.zeros(t._primitive.shape, device, t.dtype)
        return Tensor(g, device)
    inner = device.inner()
    out = Tensor.zeros(t._primitive.shape, inner, t.dtype) if g is None else Tensor(g, inner)
    if module or slot.home is inner:
        return out
    return out.to_device(slot.home)


def value_of(tensor: Tensor, keep_graph: bool) -> Tensor:
    """A transform's output as returned: tracked when an enclosing transform will
    differentiate it, else detached (on the caller's plain device when it lived there)."""
    return tensor if keep_graph else tensor.detach()


def cotangent_like(out: Tensor, value: Any, op: str) -> Tensor:
    """``value`` (a tensor of ``out``'s shape) on ``out``'s device and dtype."""
    if not isinstance(value, Tensor):
        raise DTypeError(f"ember: {op}: the cotangent must be a Tensor, got {type(value).__name__}")
    if value._primitive.shape != out._primitive.shape:
        from ember.errors import ShapeError

        raise ShapeError(
            f"ember: {op}: the cotangent has shape {value.dims()}, the output {out.dims()}; they must match"
        )
    if value._primitive.dtype != out._primitive.dtype:
        value = value.cast(out.dtype)
    if value._device is not out._device:
        value = value.to_device(out._device)
    return value
