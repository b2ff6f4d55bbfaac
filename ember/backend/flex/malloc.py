"""Keeps freed activation-sized blocks in the process heap (glibc only).

flex allocates a new numpy array for most op results; a small transformer's
activations are a few hundred kilobytes to a few megabytes each. glibc serves blocks
of that size with ``mmap`` or returns them to the system when the heap's top is
freed, so the next array of that size is fresh memory: every page faults and is
zeroed on first touch. Measured on the W4 GPT step of ``benchmarks/train_step.py``
that was about 7,000 page faults per step and a sixth of its CPU time. :func:`tune`
sets the heap's ``mmap`` threshold to 32 MiB and its trim threshold to 256 MiB once per
process (when the first flex backend is created), so freed blocks are reused;
``EMBER_MALLOC_TUNE=0`` leaves the allocator alone. The cost: up to 256 MiB of freed
memory stays with the process instead of returning to the system.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

#: Environment variable: ``0`` leaves the C allocator's settings alone.
TUNE_ENV = "EMBER_MALLOC_TUNE"

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20
_DONE: list[bool] = []


def tune() -> bool:
    """Applies the settings (once); whether they are in effect."""
    if _DONE:
        return _DONE[0]
    applied = False
    if sys.platform.startswith("linux") and os.environ.get(TUNE_ENV, "1") != "0":
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            mallopt = libc.mallopt  # glibc; musl and others have none
            mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
            applied = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
                mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
            )
        except (OSError, AttributeError):
            applied = False
    _DONE.append(applied)
    return applied
