"""The one path to fused kernels: :func:`fused` runs a :class:`FusedOp` on a device.

A fused op is a composite op that a backend may run as one kernel, by implementing the
method named by the op. :func:`fused` calls that method with backend values
(primitives); where it returns ``NotImplemented``, the op's composite runs instead on
the same arguments: the one definition of its math, written over the backend protocol
in :mod:`ember.backend.composites` (which the fusion layer's lowerings expand too).

>>> from ember import Device, Tensor
>>> from ember.backend.ops import FusedOp
>>> x = Tensor.from_floats([-1.0, 2.0], device=Device.flex())
>>> Tensor(fused(FusedOp.RELU, x.device, x.primitive), x.device).tolist()
[0.0, 2.0]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember.backend.composites import COMPOSITES
from ember.backend.ops import FusedOp
from ember.device import Device
from ember.errors import EmberError

__all__ = ["FusedOp", "composite_of", "fused", "tensor_composite"]

# The method names as plain str: getattr with a str subclass misses the type's lookup cache.
_METHODS: dict[FusedOp, str] = {op: str(op) for op in FusedOp}


#: Fused ops whose composite is still written over tensor ops (not yet moved to
#: :mod:`ember.backend.composites`): ``op -> fn(*tensors and values)``, registered with
#: :func:`tensor_composite` by the module that writes it (loaded on first use).
_TENSOR_COMPOSITES: dict[FusedOp, Callable[..., Any]] = {}
_TENSOR_COMPOSITE_MODULES = ("ember.tensor.rnn_cell", "ember.tensor.stft")


def tensor_composite(op: FusedOp) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Registers a composite written over tensor ops (``fn(*tensors)``) for ``op``: a
    transitional form for fused ops whose math has not moved to
    :mod:`ember.backend.composites` yet (issue 25: one composite per fused op)."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        _TENSOR_COMPOSITES[op] = fn
        return fn

    return register


def _tensor_composite_of(op: FusedOp) -> Callable[..., Any]:
    fn = _TENSOR_COMPOSITES.get(op)
    if fn is None:
        import importlib

        for name in _TENSOR_COMPOSITE_MODULES:
            importlib.import_module(name)
        fn = _TENSOR_COMPOSITES.get(op)
    if fn is None:
        raise EmberError(f"ember: fused op {op.name} has no composite; see ember.backend.composites")
    return fn


def composite_of(op: FusedOp) -> Callable[..., Any]:
    """``op``'s composite: ``fn(backend, *args, **options)`` over the primitive ops of
    ``backend`` (see :mod:`ember.backend.composites`). For the ops not moved there yet,
    the tensor-level composite (``fn(*tensors)``)."""
    name = _METHODS[op]
    return COMPOSITES[name] if name in COMPOSITES else _tensor_composite_of(op)


def fused(op: FusedOp, device: Device, *args: Any, **options: Any) -> Any:
    """``device.backend.<op>(*args, **options)``, or ``op``'s composite where the backend
    has no kernel. ``args`` hold primitives of ``device`` (or lists of them, or
    ``None``) and plain values; so does the result."""
    name = _METHODS[op]
    backend = device._backend
    out = getattr(backend, name)(*args, **options) if options else getattr(backend, name)(*args)
    if out is NotImplemented:
        fn = COMPOSITES.get(name)
        if fn is not None:
            return fn(backend, *args, **options)
        out = _tensor_composite_of(op)(*[_lift(a, device) for a in args], **options)
        return _lower(out)
    return out


def _lift(value: Any, device: Device) -> Any:
    from ember.tensor.tensor import Tensor

    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(None if v is None else Tensor(v, device) for v in value)
    return Tensor(value, device)


def _lower(value: Any) -> Any:
    from ember.tensor.tensor import Tensor

    if isinstance(value, Tensor):
        return value._primitive
    if isinstance(value, (list, tuple)):
        return type(value)(_lower(v) for v in value)
    return value
