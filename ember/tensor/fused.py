"""Calling a backend's optional fused kernel from above the protocol.

Composite ops written over the tensor ops (an optimizer update, a loss) first ask
the device's backend for a fused kernel of the same name; ``None`` means the backend
has none and the caller runs its composite.
"""

from __future__ import annotations

from typing import Any

from ember.tensor.tensor import Tensor


def fused(name: str, *tensors: Tensor | None, **options: Any) -> tuple[Tensor | None, ...] | None:
    """``backend.<name>(*primitives, **options)`` wrapped back into tensors, or ``None``
    when the backend returns ``NotImplemented``. All tensors share the first one's device."""
    first = tensors[0]
    device = first._d
    prims = [None if t is None else t._p for t in tensors]
    out = getattr(device._b, name)(*prims, **options)
    if out is NotImplemented:
        return None
    return tuple(None if p is None else Tensor(p, device) for p in out)
