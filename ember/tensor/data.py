"""``TensorData``: a tensor's values on the host, the data boundary of ember."""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.backend.dtype import DType, check_int_fits
from ember.backend.flex.memory import check_fits, memory_error
from ember.errors import DeviceMemoryError, DTypeError, ShapeError
from ember.tensor.shape import Shape


class TensorData:
    """Values, shape and dtype of a tensor, held in a numpy array on the host.

    >>> TensorData([[1.0, 2.0]]).shape
    Shape([1, 2])
    """

    __slots__ = ("_array",)

    def __init__(self, values: Any, shape: Any = None, dtype: DType | str | None = None):
        self._array = to_array("TensorData", values, None if dtype is None else DType.parse(dtype))
        if shape is not None:
            shape = tuple(shape)
            if int(np.prod(shape)) != self._array.size:
                raise ShapeError(f"ember: TensorData: {self._array.size} values cannot take shape {list(shape)}")
            self._array = self._array.reshape(shape)

    @classmethod
    def _wrap(cls, array: np.ndarray) -> TensorData:
        data = cls.__new__(cls)
        data._array = array
        return data

    @property
    def shape(self) -> Shape:
        return Shape(self._array.shape)

    @property
    def dtype(self) -> DType:
        return DType.from_numpy(self._array.dtype)

    @property
    def values(self) -> np.ndarray:
        """The values as a numpy array (shared, not copied)."""
        return self._array

    def num_elements(self) -> int:
        return int(self._array.size)

    def to_numpy(self) -> np.ndarray:
        """The values as a numpy array of the dtype's numpy type (shared, not copied)."""
        return self._array

    def tolist(self) -> Any:
        """Nested Python lists (floats, ints or bools)."""
        array = self._array
        if array.dtype.kind == "V" or array.dtype == np.float16:  # bfloat16
            array = array.astype(np.float32)
        return array.tolist()

    def to_vec(self) -> list:
        """The values flattened in row-major order, as a Python list."""
        return TensorData._wrap(self._array.reshape(-1)).tolist()

    def convert(self, dtype: DType | str) -> TensorData:
        return TensorData._wrap(self._array.astype(DType.parse(dtype).np))

    def assert_eq(self, other: TensorData | Any, strict: bool = True) -> None:
        """Raise AssertionError unless values (and, if strict, dtypes) are equal."""
        other = other if isinstance(other, TensorData) else TensorData(other)
        if strict and self.dtype != other.dtype:
            raise AssertionError(f"dtypes differ: {self.dtype} vs {other.dtype}")
        np.testing.assert_array_equal(self._array, other._array.astype(self._array.dtype))

    def assert_approx_eq(self, other: TensorData | Any, rtol: float = 1e-5, atol: float = 1e-6) -> None:
        """Raise AssertionError unless shapes match and values are close."""
        other = other if isinstance(other, TensorData) else TensorData(other)
        np.testing.assert_allclose(
            self._array.astype(np.float64), other._array.astype(np.float64), rtol=rtol, atol=atol
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorData):
            return NotImplemented
        return (
            self._array.dtype == other._array.dtype
            and self._array.shape == other._array.shape
            and bool(np.array_equal(self._array, other._array, equal_nan=self._array.dtype.kind == "f"))
        )

    __hash__ = None  # type: ignore[assignment]

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return self._array if dtype is None else self._array.astype(dtype)

    def __repr__(self) -> str:
        return f"TensorData({self.tolist()!r}, shape={list(self._array.shape)}, dtype={self.dtype})"


def _infer_python_dtype(array: np.ndarray) -> DType:
    kind = array.dtype.kind
    if kind == "b":
        return DType.BOOL
    if kind in "iu":
        return DType.INT64
    if kind == "f":
        return DType.FLOAT32
    if kind == "c":
        return DType.COMPLEX64  # Python complex numbers, as PyTorch's default complex dtype
    raise DTypeError(f"ember: cannot make a tensor from values of numpy kind {array.dtype!r}; give numbers or bools")


def to_array(op: str, values: Any, dtype: DType | None) -> np.ndarray:
    """A fresh numpy array of ember's dtypes from array-like ``values``.

    numpy arrays keep their dtype when ember holds it; Python floats give float32,
    ints int64 and bools bool, as in PyTorch.
    """
    if isinstance(values, TensorData):
        values = values._array
    if isinstance(values, np.ndarray) or (hasattr(values, "__array__") and not isinstance(values, (list, tuple))):
        array = np.asarray(values)
        if dtype is None:
            try:
                dtype = DType.from_numpy(array.dtype)
            except DTypeError:
                if array.dtype.kind in "iu":
                    dtype = DType.INT64
                elif array.dtype.kind == "f":
                    dtype = DType.FLOAT32
                else:
                    raise
    else:
        try:
            array = np.array(values)
        except ValueError as error:
            raise ShapeError(f"ember: {op}: the nested sequence is ragged (rows of unequal length): {error}") from None
        if array.dtype == object:
            _check_python_ints(op, array, dtype)
            raise ShapeError(
                f"ember: {op}: cannot read a tensor from {type(values).__name__} values; "
                "give a (nested) list of numbers or bools, or a numpy array"
            )
        if dtype is None:
            dtype = _infer_python_dtype(array)
    if array.dtype.kind not in "biufc" and array.dtype.kind != "V":
        raise DTypeError(f"ember: {op}: cannot make a tensor from values of dtype {array.dtype}")
    if array.dtype.kind == "c" and not dtype.is_complex:
        raise DTypeError(
            f"ember: {op}: complex values cannot be held as {dtype}; use complex64/complex128, "
            "or take .real / .imag of the data first"
        )
    # Every device copies the values whole (a broadcast view too): check that they fit
    # before the copy, or a cast's scan of them, starts.
    check_host_fits(op, array, dtype)
    if array.dtype != dtype.np:
        if dtype.is_int and array.size:
            _check_fits(op, array, dtype)
        try:
            array = array.astype(dtype.np)
        except MemoryError:
            raise host_memory_error(op, array, dtype) from None
    return array


def _view_hint(array: np.ndarray) -> str:
    if array.size and 0 in array.strides:
        return (
            f" (the array is a broadcast view of {array.size:,} elements over less memory, with strides "
            f"{list(array.strides)}; a tensor holds every element: make it from the small array and .expand(...) it)"
        )
    return ""


def check_host_fits(op: str, array: np.ndarray, dtype: DType) -> None:
    """Raise a ``DeviceMemoryError`` naming the size if a copy of ``array`` as ``dtype``
    cannot fit in this machine's memory."""
    check_fits(tuple(array.shape), dtype, dtype.itemsize, op, _view_hint(array))


def host_memory_error(op: str, array: np.ndarray, dtype: DType) -> DeviceMemoryError:
    """The ``DeviceMemoryError`` of a copy of ``array`` as ``dtype`` that the allocator refused."""
    nbytes = array.size * dtype.itemsize
    return memory_error(tuple(array.shape), dtype, nbytes, op, _view_hint(array))


def _check_fits(op: str, array: np.ndarray, dtype: DType) -> None:
    """Raise unless every value converts to the int ``dtype`` without wrapping (floats
    truncate toward zero, as in PyTorch)."""
    if array.dtype.kind == "b":
        return
    if array.dtype.kind in "iu":
        check_int_fits(op, int(array.min()), int(array.max()), dtype)
        return
    array = array.astype(np.float64)
    if not np.all(np.isfinite(array)):
        raise DTypeError(
            f"ember: {op}: cannot convert NaN or infinite values to {dtype}; replace them first or keep a float dtype"
        )
    check_int_fits(op, float(array.min()), float(array.max()), dtype)


def _check_python_ints(op: str, array: np.ndarray, dtype: DType | None) -> None:
    """Python ints beyond 64 bits make numpy fall back to objects: name the first one."""
    target = dtype if dtype is not None and dtype.is_int else DType.INT64
    for value in array.reshape(-1):
        if isinstance(value, int) and not isinstance(value, bool):
            check_int_fits(op, value, value, target)
