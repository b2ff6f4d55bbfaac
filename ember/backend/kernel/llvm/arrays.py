"""Passing numpy arrays to compiled code cheaply.

A run hands compiled code a table of buffers: its inputs, its fresh outputs, the
results of eager calls. Asking numpy for each data pointer (``a.ctypes.data``)
costs about a microsecond; a step passes dozens. Instead the table holds the array
*objects* (``id(a)``, a few tens of nanoseconds) and compiled code reads each data
pointer from the object: numpy's ``PyArrayObject`` starts with the Python object
header followed by ``char *data`` (the field ``PyArray_DATA`` reads, part of
numpy's ABI). :data:`DATA_OFFSET` is that position, checked on a probe array when
this module loads; where the check fails the table holds data pointers instead.
"""

from __future__ import annotations

import ctypes

import numpy as np


def _data_offset() -> int | None:
    probe = np.arange(3, dtype=np.float64)
    offset = object.__basicsize__
    try:
        if ctypes.c_void_p.from_address(id(probe) + offset).value == probe.ctypes.data:
            return offset
    except (ValueError, OSError):
        pass
    return None


#: Byte offset of the data pointer in a numpy array object, or ``None``.
DATA_OFFSET = _data_offset()


def _data(array: np.ndarray) -> int:
    return array.ctypes.data


_read_pointer = ctypes.c_void_p.from_address


def data_pointer(array: np.ndarray) -> int:
    """``array``'s data pointer, read from the array object where :data:`DATA_OFFSET` is
    known (about 0.15 us; numpy's ``__array_interface__`` builds a dict, about 0.9 us);
    an ndarray subclass or an unknown layout asks numpy."""
    if DATA_OFFSET is None or type(array) is not np.ndarray:
        return array.__array_interface__["data"][0]
    return _read_pointer(id(array) + DATA_OFFSET).value or 0  # numpy never holds a null pointer


#: The table entry for a C-contiguous array (which the caller keeps alive).
handle = id if DATA_OFFSET is not None else _data
