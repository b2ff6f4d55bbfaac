"""Host memory for flex: a tensor larger than the machine can hold raises
:class:`DeviceMemoryError` naming its size, instead of numpy's raw ``MemoryError``
(or, under Linux's memory overcommit, an allocation that the kernel kills later)."""

from __future__ import annotations

import math
import os

from ember.errors import DeviceMemoryError


def physical_memory() -> int | None:
    """The machine's physical memory in bytes (``None`` where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


_PHYSICAL = physical_memory()


def _size(nbytes: int) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"


def memory_error(shape: tuple[int, ...], dtype: object, nbytes: int) -> DeviceMemoryError:
    have = f"this machine's {_size(_PHYSICAL)} of memory" if _PHYSICAL else "the memory this machine can allocate"
    return DeviceMemoryError(
        f"ember: flex: a tensor of shape {list(shape)} and dtype {dtype} needs {nbytes:,} bytes ({_size(nbytes)}), "
        f"more than {have}; use a smaller shape, or process the data in chunks (e.g. .chunk(...))"
    )


def check_fits(shape: tuple[int, ...], dtype: object, itemsize: int) -> None:
    """Raise a :class:`DeviceMemoryError` if a tensor of ``shape`` cannot fit in memory."""
    if _PHYSICAL is None:
        return
    nbytes = math.prod(shape) * itemsize
    if nbytes > _PHYSICAL:
        raise memory_error(shape, dtype, nbytes)
