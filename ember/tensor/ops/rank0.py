"""PyTorch's rule for the dim of a 0-d tensor: dims 0 and -1 name the tensor itself.

``x.sum_dim(0)``, ``x.cumsum(0)``, ``x.softmax(-1)``, ``x.sort(0)`` or
``x.gather(0, i)`` of an ``x`` of shape ``[]`` give shape ``[]``, as PyTorch's (whose
``maybe_wrap_dim`` treats a scalar as rank 1). The dim helpers accept those dims only
when asked (``normalize_dim(..., wrap_scalar=True)``), so that an op PyTorch refuses
on a 0-d tensor (``narrow``, ``split``, ``chunk``, ``cat``, ``select_dim``, ``roll``...)
still raises. An op that PyTorch defines there is decorated with :func:`rank0_as_vector`:
on a 0-d tensor it checks the dims, runs on the one-element vector (0-d tensor
arguments too, such as a 0-d index) and gives its one-element results back as 0-d.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ember.tensor.shape import normalize_dim

F = TypeVar("F", bound=Callable[..., Any])


def rank0_as_vector(*dim_params: str) -> Callable[[F], F]:
    """Run the decorated op (a method, or a function of a tensor) on a 0-d tensor as on
    its one-element vector when one of ``dim_params`` (int, or a sequence of ints) is
    given; each given dim must be 0 or -1."""

    def decorate(op: F) -> F:
        signature = inspect.signature(op)

        @functools.wraps(op)
        def run(x: Any, *args: Any, **kwargs: Any) -> Any:
            if x._primitive.shape != ():
                return op(x, *args, **kwargs)
            binding = signature.bind(x, *args, **kwargs)
            binding.apply_defaults()
            bound = binding.arguments
            name = next((str(bound[k]) for k in ("name", "op") if isinstance(bound.get(k), str)), op.__name__)
            given = False
            for param in dim_params:
                dims = bound.get(param)
                if dims is None:
                    continue
                for dim in dims if isinstance(dims, Sequence) else (dims,):
                    normalize_dim(name, dim, 0, wrap_scalar=True)
                    given = True
            if not given:
                return op(x, *args, **kwargs)
            lift = x.__class__
            args = tuple(_vector(a, lift) for a in args)
            kwargs = {k: _vector(v, lift) for k, v in kwargs.items()}
            return _scalar(op(x.reshape((1,)), *args, **kwargs), lift)

        return run  # type: ignore[return-value]

    return decorate


def _vector(value: Any, cls: type[Any]) -> Any:
    return value.reshape((1,)) if isinstance(value, cls) and value._primitive.shape == () else value


def _scalar(value: Any, cls: type[Any]) -> Any:
    if isinstance(value, cls):
        return value.reshape(()) if value._primitive.shape == (1,) else value
    if isinstance(value, (tuple, list)):
        return type(value)(_scalar(v, cls) for v in value)
    return value
