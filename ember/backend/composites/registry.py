"""The table of composites (fused-op name -> its math over the protocol), the one way
to call a fused op on a backend (:func:`run`), and the helpers composites share."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ember.errors import EmberError

#: Backend method name (a :class:`~ember.backend.ops.FusedOp` value or a backward
#: kernel's name) -> its composite ``fn(ops, *args, **options)``.
COMPOSITES: dict[str, Callable[..., Any]] = {}


def composite(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Registers the decorated function as the composite of the backend method ``name``."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name in COMPOSITES:
            raise EmberError(f"ember: the fused op {name!r} already has a composite ({COMPOSITES[name].__qualname__})")
        COMPOSITES[name] = fn
        return fn

    return register


def run(ops: Any, name: str, *args: Any, **options: Any) -> Any:
    """``ops.<name>(*args, **options)``, or the composite where ``ops`` returns
    ``NotImplemented`` (a composite calls the fused ops it is built from this way)."""
    out = getattr(ops, name)(*args, **options)
    if out is NotImplemented:
        out = COMPOSITES[name](ops, *args, **options)
    return out


def stop_gradient(ops: Any, x: Any) -> Any:
    """``x`` cut from the autodiff graph where ``ops`` is an autodiff backend (its
    ``detach``); ``x`` itself on any other backend."""
    detach = getattr(ops, "detach", None)
    return x if detach is None else detach(x)


def scalar_sqrt(x: Any) -> Any:
    """``math.sqrt`` that also takes a run-time scalar of a captured step (any value
    with a ``sqrt`` method, such as the fusion layer's ``SymScalar``: recorded)."""
    return math.sqrt(x) if getattr(type(x), "sqrt", None) is None else x.sqrt()
