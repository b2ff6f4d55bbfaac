"""Compiled segments called as Python builtins: CPython's API for builtin functions
made from compiled code, and the work below which a segment is called that way."""

from __future__ import annotations

import ctypes
import sys
from typing import Any

from ember.backend.fusion.scheduler import Kernel, Library
from ember.backend.fusion.steps import ConvChain
from ember.backend.kernel.views import size_of

#: Compiled segments of at most this much work (about one unit per element a kernel
#: writes or multiply-add a matmul or convolution does) are called as Python
#: builtins (tens of nanoseconds, holding the GIL for the few microseconds they run)
#: rather than through ctypes (several hundred nanoseconds, releasing the GIL).
NATIVE_WORK = 100_000


class NativeCalls:
    """CPython's API for builtin functions made from compiled code (``None`` where
    it is missing, e.g. on another Python implementation: ctypes is used then)."""

    METH_NOARGS = 0x0004

    class MethodDef(ctypes.Structure):
        _fields_ = [
            ("name", ctypes.c_char_p),
            ("meth", ctypes.c_void_p),
            ("flags", ctypes.c_int),
            ("doc", ctypes.c_char_p),
        ]

    def __init__(self) -> None:
        api = ctypes.pythonapi
        incref = ctypes.cast(api.Py_IncRef, ctypes.c_void_p).value
        assert incref is not None, "Py_IncRef has an address"
        self.incref: int = incref
        self.new = api.PyCFunction_NewEx
        self.new.restype = ctypes.py_object
        self.new.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.py_object]


def native_calls() -> NativeCalls | None:
    try:
        return NativeCalls() if sys.implementation.name == "cpython" else None
    except (AttributeError, OSError):  # pragma: no cover - no CPython API
        return None


NATIVE = native_calls()


def segment_work(schedule: Any, steps: list[int]) -> int:
    """A segment's work, roughly (see :data:`NATIVE_WORK`)."""
    total = 0
    for index in steps:
        step = schedule.steps[index]
        if isinstance(step, Kernel):
            total += size_of(step.space)
        elif isinstance(step, (Library, ConvChain)):
            total += sum(schedule.buffers[b].nbytes for b in step.writes()) * 64  # convolutions: a bound
        else:
            out = schedule.buffers[step.out].shape
            total += size_of(out) * step.a[1].shape[-1]
    return total
