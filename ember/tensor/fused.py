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

__all__ = ["FusedOp", "composite_of", "fused"]

# The method names as plain str: getattr with a str subclass misses the type's lookup cache.
_METHODS: dict[FusedOp, str] = {op: str(op) for op in FusedOp}


def composite_of(op: FusedOp) -> Callable[..., Any]:
    """``op``'s composite: ``fn(backend, *args, **options)`` over the primitive ops of
    ``backend`` (see :mod:`ember.backend.composites`)."""
    fn = COMPOSITES.get(_METHODS[op])
    if fn is None:
        raise EmberError(f"ember: fused op {op.name} has no composite; see ember.backend.composites")
    return fn


def fused(op: FusedOp, device: Device, *args: Any, **options: Any) -> Any:
    """``device.backend.<op>(*args, **options)``, or ``op``'s composite where the backend
    has no kernel. ``args`` hold primitives of ``device`` (or lists of them, or
    ``None``) and plain values; so does the result."""
    name = _METHODS[op]
    backend = device._backend
    out = getattr(backend, name)(*args, **options) if options else getattr(backend, name)(*args)
    if out is NotImplemented:
        return composite_of(op)(backend, *args, **options)
    return out
