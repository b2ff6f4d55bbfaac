"""The one path to fused kernels: :func:`fused` runs a :class:`FusedOp` on a device.

A fused op is a composite op (a decomposition over the primitives, written once
over the tensor ops and registered here with :func:`composite`) that a backend may
run as one kernel, by implementing the method named by the op. :func:`fused` calls
that method with backend values (primitives); where it returns ``NotImplemented``,
the registered composite runs instead on the same arguments as Tensors.

>>> from ember import Device, Tensor
>>> from ember.backend.ops import FusedOp
>>> x = Tensor.from_floats([-1.0, 2.0], device=Device.flex())
>>> Tensor(fused(FusedOp.RELU, x.device, x.primitive), x.device).tolist()
[0.0, 2.0]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember.backend.ops import FusedOp
from ember.device import Device
from ember.errors import EmberError
from ember.tensor.tensor import Tensor

__all__ = ["FusedOp", "composite", "composite_of", "fused"]

_COMPOSITES: dict[FusedOp, Callable[..., Any]] = {}
# The method names as plain str: getattr with a str subclass misses the type's lookup cache.
_METHODS: dict[FusedOp, str] = {op: str(op) for op in FusedOp}
_PLAIN = (int, float, bool, str)


def composite(op: FusedOp) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Registers the decorated function as ``op``'s composite. It takes the backend
    method's arguments with Tensors in place of primitives (lists of Tensors in place
    of lists), and returns the method's result with Tensors in place of primitives."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        if op in _COMPOSITES and _COMPOSITES[op] is not fn:
            raise EmberError(f"ember: fused op {op.name} already has a composite ({_COMPOSITES[op].__qualname__})")
        _COMPOSITES[op] = fn
        return fn

    return register


def composite_of(op: FusedOp) -> Callable[..., Any]:
    """The registered composite of ``op`` (its decomposition over the tensor ops).
    ``ADAM_STEP_MANY``'s is registered by ``ember.optim``."""
    fn = _COMPOSITES.get(op)
    if fn is None:  # the modules of ember.tensor that write composites load on first use
        import ember.tensor.activation
        import ember.tensor.attention
        import ember.tensor.grid_sample
        import ember.tensor.loss
        import ember.tensor.module
        import ember.tensor.norm
        import ember.tensor.quant.linear
        import ember.tensor.rnn_cell
        import ember.tensor.stft  # noqa: F401

        fn = _COMPOSITES.get(op)
    if fn is None:
        raise EmberError(
            f"ember: fused op {op.name} has no composite registered; import the module that writes it "
            f"(see ember.backend.ops.FusedOp)"
        )
    return fn


def fused(op: FusedOp, device: Device, *args: Any, **options: Any) -> Any:
    """``device.backend.<op>(*args, **options)``, or ``op``'s composite where the backend
    has no kernel. ``args`` hold primitives of ``device`` (or lists of them, or
    ``None``) and plain values; so does the result."""
    method = getattr(device._b, _METHODS[op])
    out = method(*args, **options) if options else method(*args)
    if out is NotImplemented:
        out = composite_of(op)(*[_lift(a, device) for a in args], **options)
        return _lower(out)
    return out


def _lift(value: Any, device: Device) -> Any:
    if value is None or isinstance(value, _PLAIN):
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(None if v is None else Tensor(v, device) for v in value)
    return Tensor(value, device)


def _lower(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value._p
    if isinstance(value, (list, tuple)):
        return type(value)(_lower(v) for v in value)
    return value
