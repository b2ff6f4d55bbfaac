"""Host memory (flex's tensors, and the host copy every device makes of the data it
is given): a tensor larger than the machine can hold raises
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


def memory_error(
    shape: tuple[int, ...], dtype: object, nbytes: int, op: str = "flex", hint: str = ""
) -> DeviceMemoryError:
    """The error of a tensor that does not fit in host memory (``hint``: a cause to name)."""
    if _PHYSICAL is None:
        have = "the memory this machine can allocate"
    elif nbytes > _PHYSICAL:
        have = f"this machine's {_size(_PHYSICAL)} of memory"
    else:
        have = f"the memory free now (of this machine's {_size(_PHYSICAL)})"
    return DeviceMemoryError(
        f"ember: {op}: a tensor of shape {list(shape)} and dtype {dtype} needs {nbytes:,} bytes ({_size(nbytes)}), "
        f"more than {have}{hint}; use a smaller shape, or process the data in chunks (e.g. .chunk(...))"
    )


def check_fits(shape: tuple[int, ...], dtype: object, itemsize: int, op: str = "flex", hint: str = "") -> None:
    """Raise a :class:`DeviceMemoryError` if a tensor of ``shape`` cannot fit in memory."""
    if _PHYSICAL is None:
        return
    nbytes = math.prod(shape) * itemsize
    if nbytes > _PHYSICAL:
        raise memory_error(shape, dtype, nbytes, op, hint)
