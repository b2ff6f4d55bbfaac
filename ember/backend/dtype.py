"""Element types: :class:`DType`, its numpy counterpart and type promotion."""

from __future__ import annotations

import math
from enum import Enum
from typing import TYPE_CHECKING

import ml_dtypes
import numpy as np

from ember.errors import DTypeError, ValueRangeError

if TYPE_CHECKING:
    import numpy  # the class has a member named np: annotations in its body spell numpy


class DType(Enum):
    """The element type of a tensor.

    Floats: ``FLOAT64``, ``FLOAT32`` (the default), ``FLOAT16``, ``BFLOAT16``;
    ints: ``INT64`` (the default int), ``INT32``, ``INT8``, ``UINT8``, ``UINT64`` (wrapping
    at their width, as numpy and PyTorch); ``BOOL``; and the complex types
    ``COMPLEX64`` (two float32) and ``COMPLEX128`` (two float64), held on flex and, complex64
    only, on cube (see ``ember.fft``).
    """

    FLOAT64 = "float64"
    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    INT64 = "int64"
    INT32 = "int32"
    INT8 = "int8"
    UINT8 = "uint8"
    UINT64 = "uint64"
    BOOL = "bool"
    COMPLEX64 = "complex64"
    COMPLEX128 = "complex128"

    @property
    def np(self) -> np.dtype:
        """The numpy dtype that holds this element type."""
        return _TO_NUMPY[self]

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_int(self) -> bool:
        return self in _INTS

    @property
    def is_bool(self) -> bool:
        return self is DType.BOOL

    @property
    def is_complex(self) -> bool:
        return self is DType.COMPLEX64 or self is DType.COMPLEX128

    @property
    def kind(self) -> str:
        """``"float"``, ``"int"``, ``"bool"`` or ``"complex"``."""
        if self in _FLOATS:
            return "float"
        if self in _INTS:
            return "int"
        return "complex" if self.is_complex else "bool"

    def to_real(self) -> DType:
        """The real dtype of a complex one (``complex64`` -> ``float32``); others unchanged."""
        return _COMPLEX_TO_REAL.get(self, self)

    def to_complex(self) -> DType:
        """The complex dtype with this float's precision (``float64`` -> ``complex128``,
        other floats -> ``complex64``); complex dtypes unchanged."""
        if self.is_complex:
            return self
        return DType.COMPLEX128 if self is DType.FLOAT64 else DType.COMPLEX64

    @property
    def int_range(self) -> tuple[int, int]:
        """``(lowest, highest)`` value of an int dtype (bool: ``(0, 1)``)."""
        if self is DType.BOOL:
            return (0, 1)
        info = np.iinfo(_TO_NUMPY[self])
        return (int(info.min), int(info.max))

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return _TO_NUMPY[self].itemsize

    # Members are singletons: hash by identity at C speed (Enum's own hash is Python code,
    # and dtypes key several per-op lookups).
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"DType.{self.name}"

    def __str__(self) -> str:
        return self.value

    @staticmethod
    def from_numpy(dtype: numpy.dtype | type) -> DType:
        """The ember dtype for a numpy dtype; raises for types ember does not hold."""
        try:
            return NUMPY_TO_DTYPE[np.dtype(dtype)]
        except (KeyError, TypeError):
            supported = ", ".join(d.value for d in DType)
            raise DTypeError(
                f"ember: numpy dtype {dtype!r} has no ember counterpart; convert the data to one of: {supported}"
            ) from None

    @staticmethod
    def parse(value: DType | str | numpy.dtype | type) -> DType:
        """Accepts a DType, a name such as ``"float32"`` or ``"f32"``, or a numpy dtype."""
        if isinstance(value, DType):
            return value
        if isinstance(value, str):
            key = value.lower()
            if key in _ALIASES:
                return _ALIASES[key]
            supported = ", ".join(d.value for d in DType)
            raise DTypeError(f"ember: unknown dtype name {value!r}; use one of: {supported}")
        if value is float:
            return DType.FLOAT32
        if value is int:
            return DType.INT64
        if value is bool:
            return DType.BOOL
        return DType.from_numpy(value)


_FLOATS = frozenset({DType.FLOAT64, DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16})
_INTS = frozenset({DType.INT64, DType.INT32, DType.INT8, DType.UINT8, DType.UINT64})

_TO_NUMPY: dict[DType, np.dtype] = {
    DType.FLOAT64: np.dtype(np.float64),
    DType.FLOAT32: np.dtype(np.float32),
    DType.FLOAT16: np.dtype(np.float16),
    DType.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    DType.INT64: np.dtype(np.int64),
    DType.INT32: np.dtype(np.int32),
    DType.INT8: np.dtype(np.int8),
    DType.UINT8: np.dtype(np.uint8),
    DType.UINT64: np.dtype(np.uint64),
    DType.BOOL: np.dtype(np.bool_),
    DType.COMPLEX64: np.dtype(np.complex64),
    DType.COMPLEX128: np.dtype(np.complex128),
}
_COMPLEX_TO_REAL = {DType.COMPLEX64: DType.FLOAT32, DType.COMPLEX128: DType.FLOAT64}
#: numpy dtype -> DType, for hot paths that hold a numpy dtype already (a plain dict
#: lookup); the one such map (``ember.tensor.checks.NP_TO_DTYPE`` is this object).
NUMPY_TO_DTYPE: dict[np.dtype, DType] = {v: k for k, v in _TO_NUMPY.items()}

_ALIASES: dict[str, DType] = {d.value: d for d in DType}
_ALIASES.update(
    {
        "f64": DType.FLOAT64,
        "double": DType.FLOAT64,
        "f32": DType.FLOAT32,
        "float": DType.FLOAT32,
        "f16": DType.FLOAT16,
        "half": DType.FLOAT16,
        "bf16": DType.BFLOAT16,
        "i64": DType.INT64,
        "long": DType.INT64,
        "int": DType.INT64,
        "i32": DType.INT32,
        "u8": DType.UINT8,
        "i8": DType.INT8,
        "u64": DType.UINT64,
        "bool_": DType.BOOL,
        "c64": DType.COMPLEX64,
        "cfloat": DType.COMPLEX64,
        "c128": DType.COMPLEX128,
        "cdouble": DType.COMPLEX128,
    }
)

# Rank used by promotion: within a kind the wider type wins.
_RANK = {
    DType.BOOL: 0,
    DType.UINT8: 1,
    DType.INT8: 1,
    DType.INT32: 2,
    DType.INT64: 3,
    DType.UINT64: 3,
    DType.BFLOAT16: 4,
    DType.FLOAT16: 4,
    DType.FLOAT32: 5,
    DType.FLOAT64: 6,
    DType.COMPLEX64: 7,
    DType.COMPLEX128: 8,
}


def promote(a: DType, b: DType) -> DType:
    """The dtype of a binary op's result, following PyTorch's tensor-tensor rules.

    bool < ints < floats < complex; within a kind the wider type wins; float16 with
    bfloat16 gives float32, int8 with uint8 int32 (PyTorch's int16, which ember lacks);
    complex64 with float64 gives complex128; uint64 with another int is refused, as
    PyTorch refuses it.
    """
    if a is b:
        return a
    if a.is_complex or b.is_complex:
        wide = DType.FLOAT64 in (a, b) or DType.COMPLEX128 in (a, b)
        return DType.COMPLEX128 if wide else DType.COMPLEX64
    if DType.UINT64 in (a, b) and a in _INTS and b in _INTS:
        raise DTypeError(
            f"ember: no common dtype for {a} and {b} (as in PyTorch, uint64 does not promote with other ints); "
            "cast one of them first"
        )
    ra, rb = _RANK[a], _RANK[b]
    if ra == rb:  # float16 and bfloat16; int8 and uint8
        return DType.FLOAT32 if a in _FLOATS else DType.INT32
    return a if ra > rb else b


def check_int_fits(op: str, low: float, high: float, dtype: DType) -> None:
    """Raise a :class:`ValueRangeError` unless the values ``low..high`` (ints, or floats
    that truncate toward zero) fit the int ``dtype``: ember never wraps a value
    silently when it makes a tensor."""
    lo, hi = dtype.int_range
    if lo <= math.trunc(low) and math.trunc(high) <= hi:
        return
    bad = low if low < lo else high
    wider = "int64" if dtype is not DType.INT64 else "a float dtype (float64)"
    raise ValueRangeError(
        f"ember: {op}: the value {bad} does not fit {dtype} (range [{lo}, {hi}]); "
        f"use a wider dtype such as {wider}, or bring the values into range first"
    )
