"""The checked paths from a tensor op to the backend's ``unary``/``binary`` families.

``mode`` says which dtypes an op takes and what it does with the others:

* ``"arith"``: ints and floats; bools count as int64.
* ``"float"``: result is float; int and bool operands are cast to float32 first.
* ``"cmp"``: any dtype; the result is bool.
* ``"bool"``: bool operands only.
* ``"int"``: int operands only (bitwise ops).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ember.backend.dtype import DType
from ember.errors import DTypeError
from ember.tensor.dispatch import (
    BOOL_NP,
    FLOAT_NP,
    INT_NP,
    NP_TO_DTYPE,
    as_scalar,
    check_device,
    is_symbolic,
    promote_pair,
    scalar_for,
)
from ember.tensor.shape import broadcast_shapes

if TYPE_CHECKING:
    from ember.tensor.tensor import Tensor

_I64 = DType.INT64
_F32 = DType.FLOAT32


def _kind_error(op: str, mode: str, prim: Any) -> DTypeError:
    wanted = {"bool": "bool", "int": "int", "arith": "int or float"}[mode]
    return DTypeError(
        f"ember: {op}: needs {wanted} tensors, got dtype {NP_TO_DTYPE[prim.dtype]} "
        f"(shape {list(prim.shape)}); convert with .cast(...) first"
    )


def _fit(op: str, mode: str, prim: Any, backend: Any) -> Any:
    """Cast or reject one (already promoted) operand for ``mode``."""
    dt = prim.dtype
    if mode == "arith":
        if dt == BOOL_NP:
            return backend.cast(prim, _I64)
    elif mode == "float":
        if dt not in FLOAT_NP:
            return backend.cast(prim, _F32)
    elif (mode == "bool" and dt != BOOL_NP) or (mode == "int" and dt not in INT_NP):
        raise _kind_error(op, mode, prim)
    return prim


def binary(self: Tensor, other: Any, op: str, name: str, mode: str) -> Tensor:
    """``self <op> other`` for a tensor or a Python scalar ``other``."""
    d = self._d
    a = self._p
    if isinstance(other, self.__class__):
        b = other._p
        if other._d is not d:
            check_device(name, self, other)
        if a.dtype != b.dtype:
            a, b = promote_pair(name, self, other)
        if mode != "cmp":
            dt = a.dtype
            if mode == "arith":
                if dt == BOOL_NP:
                    a, b = d._b.cast(a, _I64), d._b.cast(b, _I64)
            elif mode == "float":
                if dt not in FLOAT_NP:
                    a, b = d._b.cast(a, _F32), d._b.cast(b, _F32)
            else:
                a = _fit(name, mode, a, d._b)
                b = _fit(name, mode, b, d._b)
        if a.shape != b.shape:
            broadcast_shapes(name, a.shape, b.shape)
        return self.__class__(d._b.binary(op, a, b), d)
    backend = d._b
    a, s = scalar_for(name, a, other, backend)
    if mode != "cmp":
        a = _fit(name, mode, a, backend)
        if (mode == "float" or (mode == "arith" and a.dtype in FLOAT_NP)) and not is_symbolic(s):
            s = float(s)
        elif mode == "bool" and not isinstance(s, bool):
            raise DTypeError(f"ember: {name}: needs a bool scalar, got {s!r}")
    return self.__class__(backend.binary(op, a, s), d)


def reverse_scalar(self: Tensor, other: Any, op: str, name: str, mode: str) -> Tensor:
    """``other <op> self`` for a Python scalar ``other``: the scalar becomes a tensor."""
    value = as_scalar(name, other)
    p = self._p
    dtype = NP_TO_DTYPE[p.dtype]
    if isinstance(value, float) and not dtype.is_float:
        dtype = _F32
    lhs = self.__class__(self._d._b.full((), value, dtype), self._d)
    return binary(lhs, self, op, name, mode)


def unary(self: Tensor, op: str, name: str, mode: str) -> Tensor:
    """``op(self)`` elementwise. Modes as for :func:`binary`, plus ``"numeric"``
    (ints and floats, bools rejected) and ``"any"``."""
    p = self._p
    d = self._d
    dt = p.dtype
    if mode == "float":
        if dt not in FLOAT_NP:
            p = d._b.cast(p, _F32)
    elif mode == "numeric":
        if dt == BOOL_NP:
            raise DTypeError(
                f"ember: {name}: not defined on bool tensors (shape {list(p.shape)}); "
                "cast to int or float first"
            )
    elif mode != "any":
        p = _fit(name, mode, p, d._b)
    return self.__class__(d._b.unary(op, p), d)


def is_integral(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)
