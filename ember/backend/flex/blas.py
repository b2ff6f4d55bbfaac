"""numpy's own OpenBLAS, found at run time: ``sgemm``/``dgemm`` (and ``sgemv``/``dgemv``)
by address, and the thread count, which ember owns.

numpy wheels bundle OpenBLAS (on Linux ``numpy.libs/libscipy_openblas64_-*.so``,
with ILP64 symbols such as ``scipy_cblas_sgemm64_``). The fusion layer's compiled
code calls its ``cblas_?gemm`` through a function pointer, so no link step and no C
compiler are needed.

Threads. OpenBLAS starts as many threads as cores; on a machine with other load
that is slower, not faster (two BLAS threads on two cores with one busy measured
8-11x slower than one). :func:`load` sets the count once per process, from
``EMBER_NUM_THREADS`` (default 1, at most the cores the process may use); the flex
backend calls it when it is created, so the setting holds for eager numpy matmuls
and compiled code alike.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
from dataclasses import dataclass, replace

#: Environment variable for the BLAS thread count ember sets (default 1).
THREADS_ENV = "EMBER_NUM_THREADS"

# CBLAS enum values.
ROW_MAJOR = 101
NO_TRANS = 111
TRANS = 112


@dataclass(frozen=True)
class Blas:
    """Addresses of one OpenBLAS library's entry points."""

    path: str
    sgemm: int
    dgemm: int
    int_bits: int  # width of BLAS integers: 64 (ILP64) or 32
    set_threads: int  # address of ``openblas_set_num_threads`` (0 if absent)
    threads: int  # the count ember set
    sgemv: int = 0  # ``cblas_?gemv`` (0 if absent): a matmul with one row or one column
    dgemv: int = 0
    #: The kernel set OpenBLAS runs (``openblas_get_corename``: ``Haswell``, ``SkylakeX``,
    #: ...; it follows ``OPENBLAS_CORETYPE`` where that is set), ``""`` if it does not say.
    core: str = ""


_PREFIXES = (("scipy_", "64_"), ("", "64_"), ("", ""))
_CACHE: list[Blas | None] = []


def _candidates() -> list[str]:
    """Library paths to try, most specific first: the OpenBLAS already mapped into
    this process (numpy loaded it), then numpy's bundled copies, then the system's."""
    import numpy as np

    paths: list[str] = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1] if line.strip() else ""
                if "openblas" in os.path.basename(path).lower() and path not in paths:
                    paths.append(path)
    except OSError:
        pass
    root = os.path.dirname(os.path.dirname(np.__file__))
    for pattern in ("numpy.libs/*openblas*", "numpy/.dylibs/*openblas*", "numpy.libs/*openblas*.dll"):
        paths += sorted(p for p in glob.glob(os.path.join(root, pattern)) if p not in paths)
    found = ctypes.util.find_library("openblas")
    if found:
        paths.append(found)
    return paths


def _address(lib: ctypes.CDLL, name: str) -> int:
    try:
        return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0
    except AttributeError:
        return 0


def _open(path: str) -> Blas | None:
    try:
        lib = (
            ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | ctypes.RTLD_GLOBAL)
            if sys.platform != "win32"
            else ctypes.CDLL(path)
        )
    except OSError:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            return None
    for prefix, suffix in _PREFIXES:
        sgemm = _address(lib, f"{prefix}cblas_sgemm{suffix}")
        dgemm = _address(lib, f"{prefix}cblas_dgemm{suffix}")
        if not (sgemm and dgemm):
            continue
        int_bits = 64 if suffix else _config_bits(lib, prefix, suffix)
        set_threads = _address(lib, f"{prefix}openblas_set_num_threads{suffix}")
        sgemv = _address(lib, f"{prefix}cblas_sgemv{suffix}")
        dgemv = _address(lib, f"{prefix}cblas_dgemv{suffix}")
        return Blas(path, sgemm, dgemm, int_bits, set_threads, 0, sgemv, dgemv, _core(lib, prefix, suffix))
    return None


def _core(lib: ctypes.CDLL, prefix: str, suffix: str) -> str:
    get = getattr(lib, f"{prefix}openblas_get_corename{suffix}", None)
    if get is None:
        return ""
    get.restype = ctypes.c_char_p
    return (get() or b"").decode("ascii", "replace")


def _config_bits(lib: ctypes.CDLL, prefix: str, suffix: str) -> int:
    get = getattr(lib, f"{prefix}openblas_get_config{suffix}", None)
    if get is None:
        return 32
    get.restype = ctypes.c_char_p
    return 64 if b"USE64BITINT" in (get() or b"") else 32


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def thread_count() -> int:
    """The BLAS thread count from ``EMBER_NUM_THREADS`` (default 1), never more than
    the cores this process may use (more threads than cores only wait for each other)."""
    raw = os.environ.get(THREADS_ENV, "1")
    try:
        requested = int(raw)
    except ValueError:
        requested = 0
    if requested < 1:
        from ember.errors import ConfigError

        raise ConfigError(f"ember: {THREADS_ENV}={raw!r} is not a positive integer; set it to a thread count such as 1")
    return min(requested, available_cores())


def load() -> Blas | None:
    """numpy's OpenBLAS, with its thread count set (once per process); ``None`` if
    none is found."""
    if _CACHE:
        return _CACHE[0]
    blas = None
    for path in _candidates():
        blas = _open(path)
        if blas is not None:
            break
    if blas is not None:
        threads = thread_count()
        if blas.set_threads:
            set_threads = ctypes.CFUNCTYPE(None, ctypes.c_int)(blas.set_threads)
            set_threads(threads)
        blas = replace(blas, threads=threads)
    _CACHE.append(blas)
    return blas
