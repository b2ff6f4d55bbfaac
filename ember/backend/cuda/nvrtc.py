"""NVRTC: CUDA C to PTX or cubin, with an on-disk cache.

NVRTC runs without a GPU or a driver (it is a compiler library), so CI compiles
every kernel the generator emits for ``sm_80`` and ``sm_90``. It is reached through
NVIDIA's ``cuda-bindings`` (``cuda.bindings.nvrtc``; the library itself comes from
the ``nvidia-cuda-nvrtc`` wheel).

Compiled code is cached under ``$EMBER_CUDA_CACHE`` (default
``~/.cache/ember/cuda``), keyed by the SHA-256 of the source, the target, the
options and NVRTC's version; entries are written to a temporary file and renamed,
so concurrent processes never read a partial one. ``ptxas`` statistics (registers,
spills, shared memory) are parsed from the log of a compile with ``-Xptxas=-v``.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from ember.backend.cuda.prelude import PRELUDE
from ember.errors import BackendUnavailableError, EmberError

#: Options every kernel is compiled with: IEEE division and square roots, denormals
#: kept, and no contraction of ``a * b + c`` into one fused multiply-add, so the
#: results round as numpy's (and the Philox mappings stay bit-identical to flex).
OPTIONS = ("-std=c++17", "--fmad=false", "-default-device")
CACHE_ENV = "EMBER_CUDA_CACHE"

_LOCK = threading.Lock()
_memory: dict[str, bytes] = {}


class CompileError(EmberError, RuntimeError):
    """NVRTC rejected a generated kernel (a bug in ember's code generator)."""


@dataclass(frozen=True)
class Resources:
    """What ``ptxas -v`` reports for one kernel."""

    registers: int
    spill_stores: int
    spill_loads: int
    stack: int
    shared: int


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        try:
            from cuda import nvrtc  # cuda-python < 12.6
        except ImportError as error:
            raise BackendUnavailableError(
                "ember: cuda: NVRTC is not available; install the cuda extra: pip install 'ember[cuda12]' "
                f"(or 'ember[cuda13]') ({error})"
            ) from None
    return nvrtc


def version() -> tuple[int, int]:
    """NVRTC's ``(major, minor)``."""
    nvrtc = _nvrtc()
    err, major, minor = nvrtc.nvrtcVersion()
    _check(nvrtc, err, "nvrtcVersion")
    return int(major), int(minor)


def _check(nvrtc, err, what: str) -> None:
    if int(err) != 0:
        _, text = nvrtc.nvrtcGetErrorString(err)
        raise CompileError(f"ember: cuda: {what} failed: {text.decode() if isinstance(text, bytes) else text}")


def cache_dir() -> Path:
    root = os.environ.get(CACHE_ENV)
    return Path(root) if root else Path.home() / ".cache" / "ember" / "cuda"


def full_source(source: str) -> str:
    """A generated kernel source with the helpers it uses."""
    return PRELUDE + "\n" + source


def compile_source(
    source: str,
    arch: str,
    *,
    output: str = "cubin",
    extra: tuple[str, ...] = (),
    name: str = "kernel.cu",
    use_cache: bool = True,
) -> tuple[bytes, str]:
    """``source`` (complete CUDA C) compiled for ``arch`` (``"sm_90"``; ``"compute_90"``
    for PTX), as ``(code, log)``. ``output`` is ``"cubin"`` or ``"ptx"``."""
    options = OPTIONS + tuple(extra) + (f"-arch={arch}",)
    key = hashlib.sha256("\0".join((source, output, *options, repr(version()))).encode()).hexdigest()
    hit = _memory.get(key)
    if hit is not None:
        return hit, ""
    path = cache_dir() / key[:2] / f"{key}.{output}"
    if use_cache and path.exists():
        code = path.read_bytes()
        _memory[key] = code
        return code, ""
    code, log = _compile(source, options, output, name)
    if use_cache:
        _store(path, code)
    with _LOCK:
        _memory[key] = code
    return code, log


def _store(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:  # a read-only or full cache only costs a recompile
        pass


def _compile(source: str, options: tuple[str, ...], output: str, name: str) -> tuple:
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _check(nvrtc, err, "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in options]
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        err, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = bytearray(size)  # NVRTC writes into it: never an immutable (maybe shared) bytes object
        nvrtc.nvrtcGetProgramLog(prog, log)
        text = log.decode(errors="replace").rstrip("\x00 \n")
        if int(result) != 0:
            raise CompileError(
                f"ember: cuda: NVRTC could not compile a generated kernel ({name}); this is a bug "
                f"in ember's code generator, please report it with this log:\n{text}"
            )
        if output == "both":
            return (_read(nvrtc, prog, "ptx"), _read(nvrtc, prog, "cubin")), text
        return _read(nvrtc, prog, output), text
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _read(nvrtc, prog, output: str) -> bytes:
    if output == "cubin":
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(nvrtc, err, "nvrtcGetCUBINSize")
        code = bytearray(size)
        (err,) = nvrtc.nvrtcGetCUBIN(prog, code)
    else:
        err, size = nvrtc.nvrtcGetPTXSize(prog)
        _check(nvrtc, err, "nvrtcGetPTXSize")
        code = bytearray(size)
        (err,) = nvrtc.nvrtcGetPTX(prog, code)
    _check(nvrtc, err, f"reading the {output}")
    return bytes(code)


def compile_ptx_and_cubin(source: str, arch: str, extra: tuple[str, ...] = ()) -> tuple[bytes, bytes, str]:
    """One NVRTC compile of ``source`` for ``arch`` (``"sm_90"``) giving its PTX, its
    cubin and the log (not cached: CI checks the compiler's own output)."""
    (ptx, cubin), log = _compile(source, OPTIONS + tuple(extra) + (f"-arch={arch}",), "both", "kernels.cu")
    return ptx, cubin, log


_ENTRY = re.compile(r"Compiling entry function '(\w+)'")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def resources(log: str) -> dict[str, Resources]:
    """Per-kernel register, spill, stack and shared-memory use from a ``-Xptxas=-v`` log."""
    out: dict[str, Resources] = {}
    current = None
    spill = (0, 0, 0)
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            current = m.group(1)
            spill = (0, 0, 0)
            continue
        m = _SPILL.search(line)
        if m and current is not None:
            spill = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
            continue
        m = _USED.search(line)
        if m and current is not None:
            out[current] = Resources(int(m.group(1)), spill[1], spill[2], spill[0], int(m.group(2) or 0))
            current = None
    return out


__all__ = [
    "OPTIONS",
    "CompileError",
    "Resources",
    "cache_dir",
    "compile_ptx_and_cubin",
    "compile_source",
    "full_source",
    "resources",
    "version",
]
