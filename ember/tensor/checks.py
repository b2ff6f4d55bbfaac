"""Argument checks shared by the tensor ops: devices, dtypes, scalars.

These run before a backend is called, so that a wrong call raises an ember error
naming the op and its operands instead of failing deep inside a backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ember.backend.dtype import NUMPY_TO_DTYPE as NP_TO_DTYPE
from ember.backend.dtype import DType, check_int_fits, promote
from ember.errors import DeviceError, DTypeError, ScalarOverflowError, ValueRangeError

if TYPE_CHECKING:
    from ember.tensor.ops.base import TensorLike

FLOAT_NP = frozenset(d.np for d in DType if d.is_float)
INT_NP = frozenset(d.np for d in DType if d.is_int)
COMPLEX_NP = frozenset(d.np for d in DType if d.is_complex)
BOOL_NP = np.dtype(np.bool_)
F32 = DType.FLOAT32
I64 = DType.INT64
_INT_RANGE = {d.np: d.int_range for d in DType if d.is_int}


def check_device(op: str, a: TensorLike, b: TensorLike) -> None:
    """Raise unless ``a`` and ``b`` live on the same device."""
    if a._device != b._device:
        raise DeviceError(
            f"ember: {op}: operands live on different devices, {a._device!r} and {b._device!r}; "
            f"move one with .to_device(...) first{_autodiff_hint(a._device, b._device)}"
        )


def _autodiff_hint(a: Any, b: Any) -> str:
    """For an autodiff device meeting its own inner device (inputs made for training
    given to a ``model.valid()`` module): the fix."""
    if a.is_autodiff() != b.is_autodiff() and a.inner() == b.inner():
        return (
            " (one is the other's autodiff device: after model.valid(), which moves the parameters to "
            "device.inner(), give inputs on device.inner() too, e.g. x.to_device(device.inner()))"
        )
    return ""


def is_symbolic(value: Any) -> bool:
    """Whether ``value`` is a run-time scalar of a trace (``ember.compile``): a float
    whose value is known only when the compiled function runs."""
    kind = type(value)
    if kind is float or kind is int or kind is bool:  # the common case, without a failed lookup
        return False
    return getattr(kind, "symbolic_scalar", False)


def as_scalar(op: str, value: Any, complex_ok: bool = False) -> int | float | bool:
    """A Python scalar from ``value`` (Python or numpy number, or a traced run-time
    scalar, which stands for a float), or a DTypeError. Complex numbers only where
    ``complex_ok`` (arithmetic and ``full``: the ops that make or take complex tensors)."""
    if isinstance(value, (bool, int, float)) or is_symbolic(value):
        if type(value) is int and value.bit_length() > 1023:
            check_float_range(op, value)
        return value
    if isinstance(value, (complex, np.complexfloating)):
        if complex_ok:
            return complex(value)  # type: ignore[return-value]  # complex scalars pass through
        raise DTypeError(f"ember: {op}: does not take complex numbers, got {value!r}")
    if isinstance(value, (np.generic,)) and value.dtype.kind in "biuf":
        return value.item()
    raise DTypeError(
        f"ember: {op}: expected a Tensor or a Python number, got {type(value).__name__}; "
        "wrap arrays with Tensor.from_data(...)"
    )


def check_float_range(op: str, value: int) -> None:
    """Raise a ScalarOverflowError for an int that no dtype holds (past float64's range:
    Python's ``float()`` of it raises a raw ``OverflowError``)."""
    try:
        float(value)
    except OverflowError:
        digits = str(abs(value))
        shown = f"{'-' if value < 0 else ''}{digits[:6]}...({len(digits)} digits)"
        raise ScalarOverflowError(
            f"ember: {op}: the scalar {shown} is beyond every dtype's range (float64 holds up to about 1.8e308); "
            "use a smaller value, or float('inf') if an infinity is meant"
        ) from None


def promote_pair(op: str, a: TensorLike, b: TensorLike) -> tuple[Any, Any]:
    """Both primitives cast to their common dtype (PyTorch's promotion rules)."""
    pa, pb = a._primitive, b._primitive
    da, db = NP_TO_DTYPE[pa.dtype], NP_TO_DTYPE[pb.dtype]
    target = promote(da, db)
    backend = a._device._backend
    if da is not target:
        pa = backend.cast(pa, target)
    if db is not target:
        pb = backend.cast(pb, target)
    return pa, pb


def scalar_for(op: str, prim: Any, value: Any, backend: Any) -> tuple[Any, int | float | bool]:
    """A primitive and a scalar ready for a backend op: an int tensor meeting a float
    scalar is cast to float32; bools meeting numbers become int64 or float32; an int
    scalar out of an int dtype's range raises."""
    value = as_scalar(op, value, complex_ok=True)
    dt = prim.dtype
    if type(value) is complex and dt not in COMPLEX_NP:  # a real tensor meeting a complex scalar
        return backend.cast(prim, DType.COMPLEX128 if dt == np.float64 else DType.COMPLEX64), value  # type: ignore[return-value]  # complex scalars pass through
    if dt in FLOAT_NP or dt in COMPLEX_NP:
        return prim, value
    if (isinstance(value, float) and not isinstance(value, bool)) or is_symbolic(value):
        return backend.cast(prim, F32), value
    if dt is BOOL_NP or dt == BOOL_NP:
        if isinstance(value, bool):
            return prim, value
        prim, dt = backend.cast(prim, I64), np.dtype(np.int64)
    lo, hi = _INT_RANGE[dt]
    if not lo <= value <= hi:
        raise ValueRangeError(
            f"ember: {op}: the scalar {value} does not fit the tensor's dtype {NP_TO_DTYPE[dt]}; "
            "cast the tensor to a wider dtype first"
        )
    return prim, value


def check_value_fits(op: str, value: int | float | bool, dtype: DType) -> None:
    """Raise unless the scalar ``value`` converts to ``dtype`` without wrapping (an int
    dtype takes ints and integral floats in its range)."""
    if isinstance(value, complex) and not dtype.is_complex:
        raise DTypeError(f"ember: {op}: the complex value {value} does not fit {dtype}; give a complex dtype")
    if not dtype.is_int or isinstance(value, bool):
        return
    if isinstance(value, float):
        if not value.is_integer():
            raise DTypeError(
                f"ember: {op}: the value {value} is not an integer, so it does not fit the int dtype {dtype}"
            )
        value = int(value)
    check_int_fits(op, value, value, dtype)
