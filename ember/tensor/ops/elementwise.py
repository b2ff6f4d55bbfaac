"""The checked paths from a tensor op to the backend's ``unary``/``binary`` families.

``mode`` says which dtypes an op takes and what it does with the others:

* ``"arith"``: ints and floats; bools count as int64.
* ``"float"``: result is float; int and bool operands are cast to float32 first.
* ``"cmp"``: any dtype; the result is bool.
* ``"bool"``: bool operands only.
* ``"int"``: int operands only (bitwise ops).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ember.backend.dtype import DType
from ember.backend.ops import BinaryOp, ReduceOp, UnaryOp
from ember.errors import DivisionByZeroError, DTypeError
from ember.tensor import autocast
from ember.tensor.checks import (
    BOOL_NP,
    COMPLEX_NP,
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
    from ember.tensor.ops.base import TensorLike

T = TypeVar("T", bound="TensorLike")

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


def binary(self: T, other: Any, op: BinaryOp, name: str, mode: str) -> T:
    """``self <op> other`` for a tensor or a Python scalar ``other``."""
    if autocast.ACTIVE:
        self, other = autocast.cast_inputs(name, self, other)
    d = self._device
    a = self._primitive
    if op == BinaryOp.SUB and mode == "arith":
        _check_no_bool_sub(name, self, other)
    if isinstance(other, self.__class__):
        b = other._primitive
        if other._device is not d:
            check_device(name, self, other)
        if a.dtype != b.dtype:
            a, b = promote_pair(name, self, other)
        if mode != "cmp":
            dt = a.dtype
            if dt not in FLOAT_NP and dt in COMPLEX_NP:
                _check_complex_binary(name, op, a)
            elif mode == "arith":
                if dt == BOOL_NP:
                    op = _bool_arith(name, op)
                elif op in _INT_DIVISION and dt not in FLOAT_NP:
                    _check_no_zero(name, b, d._backend)
            elif mode == "float":
                if dt not in FLOAT_NP:
                    a, b = d._backend.cast(a, _F32), d._backend.cast(b, _F32)
            else:
                a = _fit(name, mode, a, d._backend)
                b = _fit(name, mode, b, d._backend)
        elif op not in _EQUALITY and a.dtype in COMPLEX_NP:
            _check_complex_binary(name, op, a)
        if a.shape != b.shape:
            broadcast_shapes(name, a.shape, b.shape)
        return self.__class__(d._backend.binary(op, a, b), d)
    backend = d._backend
    a, s = scalar_for(name, a, other, backend)
    if mode == "arith" and a.dtype == BOOL_NP:  # a bool tensor with a bool scalar
        return self.__class__(backend.binary(_bool_arith(name, op), a, s), d)
    if a.dtype in COMPLEX_NP:
        if op not in _EQUALITY:
            _check_complex_binary(name, op, a)
        return self.__class__(backend.binary(op, a, s), d)
    if mode != "cmp":
        a = _fit(name, mode, a, backend)
        if (mode == "float" or (mode == "arith" and a.dtype in FLOAT_NP)) and not is_symbolic(s):
            s = float(s)
        elif mode == "bool" and not isinstance(s, bool):
            raise DTypeError(f"ember: {name}: needs a bool scalar, got {s!r}")
        elif op in _INT_DIVISION and a.dtype not in FLOAT_NP and s == 0:
            raise _division_by_zero(name, NP_TO_DTYPE[a.dtype])
    return self.__class__(backend.binary(op, a, s), d)


# Arithmetic on two bools stays bool where PyTorch keeps it so (``+`` is or, ``*`` is
# and); the others have no bool meaning and raise, as in PyTorch.
_BOOL_ARITH = {
    BinaryOp.ADD: BinaryOp.LOGICAL_OR,
    BinaryOp.MUL: BinaryOp.LOGICAL_AND,
    BinaryOp.MAXIMUM: BinaryOp.LOGICAL_OR,
    BinaryOp.MINIMUM: BinaryOp.LOGICAL_AND,
}
_INT_DIVISION = frozenset({BinaryOp.FLOOR_DIV, BinaryOp.REMAINDER})
_EQUALITY = frozenset({BinaryOp.EQ, BinaryOp.NE})


def _check_complex_binary(name: str, op: BinaryOp, prim: Any) -> None:
    from ember.tensor.ops.complex import check_complex_binary

    check_complex_binary(name, op, prim)


def _check_complex_unary(name: str, op: UnaryOp, prim: Any) -> None:
    from ember.tensor.ops.complex import check_complex_unary

    check_complex_unary(name, op, prim)


def _bool_arith(name: str, op: BinaryOp) -> BinaryOp:
    logical = _BOOL_ARITH.get(op)
    if logical is not None:
        return logical
    raise DTypeError(f"ember: {name}: not defined on two bool operands (as in PyTorch); cast to int first")


def _check_no_bool_sub(name: str, a: Any, b: Any) -> None:
    """PyTorch refuses ``-`` with a bool tensor operand (its meaning as a mask is unclear)."""
    if a._primitive.dtype == BOOL_NP or (isinstance(b, a.__class__) and b._primitive.dtype == BOOL_NP):
        raise DTypeError(
            f"ember: {name}: subtraction with a bool tensor is not defined (as in PyTorch); use bool_xor (^) "
            "for the difference of two masks, bool_not() to invert one, or cast to int first"
        )


def _division_by_zero(name: str, dtype: DType) -> DivisionByZeroError:
    return DivisionByZeroError(
        f"ember: {name}: integer division by zero (the {dtype} divisor holds 0), which PyTorch refuses too; "
        "mask the zeros first (e.g. divisor.mask_fill(divisor.equal_elem(0), 1)) or divide float tensors "
        "(inf or NaN results)"
    )


def _check_no_zero(name: str, divisor: Any, backend: Any) -> None:
    """Raise if the int ``divisor`` holds a 0 (reads one bool back from the device)."""
    if 0 in divisor.shape:
        return
    zero = backend.reshape(backend.binary(BinaryOp.EQ, divisor, 0), (-1,))
    if bool(backend.to_numpy(backend.reduce(ReduceOp.ANY, zero, 0)).reshape(-1)[0]):
        raise _division_by_zero(name, NP_TO_DTYPE[divisor.dtype])


def reverse_scalar(self: T, other: Any, op: BinaryOp, name: str, mode: str) -> T:
    """``other <op> self`` for a Python scalar ``other``: the scalar becomes a tensor."""
    value = as_scalar(name, other, complex_ok=True)
    p = self._primitive
    dtype = NP_TO_DTYPE[p.dtype]
    if isinstance(value, complex) and not dtype.is_complex:
        dtype = DType.COMPLEX128 if dtype is DType.FLOAT64 else DType.COMPLEX64
    elif isinstance(value, float) and not dtype.is_float and not dtype.is_complex:
        dtype = _F32
    elif dtype is DType.BOOL and not isinstance(value, bool):
        dtype = _I64
    lhs = self.__class__(self._device._backend.full((), value, dtype), self._device)
    return binary(lhs, self, op, name, mode)


def unary(self: T, op: UnaryOp, name: str, mode: str) -> T:
    """``op(self)`` elementwise. Modes as for :func:`binary`, plus ``"numeric"``
    (ints and floats, bools rejected) and ``"any"``."""
    if autocast.ACTIVE:
        self = autocast.cast_input(name, self)
    p = self._primitive
    d = self._device
    dt = p.dtype
    if mode == "float":
        if dt not in FLOAT_NP:
            if dt in COMPLEX_NP:
                _check_complex_unary(name, op, p)
            else:
                p = d._backend.cast(p, _F32)
    elif mode == "numeric":
        if dt == BOOL_NP:
            raise DTypeError(
                f"ember: {name}: not defined on bool tensors (shape {list(p.shape)}); cast to int or float first"
            )
        if dt in COMPLEX_NP:
            _check_complex_unary(name, op, p)
    elif dt in COMPLEX_NP:
        _check_complex_unary(name, op, p)
    elif mode != "any":
        p = _fit(name, mode, p, d._backend)
    return self.__class__(d._backend.unary(op, p), d)


def is_integral(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)
