"""Compiled machine code kept on disk, so a process does not optimise and compile again
what an earlier one compiled: flex's native kernels, the quantized kernels and
``ember.compile``'s LLVM plans (the same LLVM IR in every process for the same graph)
load in milliseconds instead of seconds.

A module's key is a SHA-256 of its IR text and of everything the machine code depends
on: the host CPU's name and features, the target triple, llvmlite's and LLVM's versions,
and the compile options. A module whose IR is a function of a *recipe* (a tuple of
plain values, such as flex's per-shape kernels' ``("gemm", m, n, k, ...)``) and of
ember's kernel-emitting source may be keyed by the recipe and :func:`source_digest`
instead (``compile_module(..., recipe=...)``): a cached module then loads without
emitting and printing its IR, which costs more than loading it (about 0.1 s of CPU for
the kernels of the digits example's first eager step). Only callers whose IR is the same from one process to the next
ask for it (:func:`~ember.backend.kernel.llvm.jit.compile_module`'s ``cache=True``):
a fusion plan's code reads its buffers' addresses from a table the plan writes once
its module is loaded (``ember.backend.fusion.llvm.codegen.TABLES``), never from
constants of its IR.

The directory is ``$EMBER_CACHE_DIR/llvm`` when ``EMBER_CACHE_DIR`` is set, else
``$XDG_CACHE_HOME/ember/llvm`` (``~/.cache/ember/llvm``). ``EMBER_COMPILE_CACHE=0`` turns
it off. Each file holds a digest of its contents: a truncated or damaged file is
deleted and the module compiled again. Files are written to a temporary name and
renamed, so concurrent processes never read half a file; beyond
:data:`MAX_BYTES` the least recently written files go. A directory that cannot be
created or written only means no caching.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

#: The cache's size limit; the oldest files are removed beyond it.
MAX_BYTES = 256 * 1024 * 1024

_MAGIC = b"ember-object-1\n"
_DIGEST = 32  # bytes of SHA-256


def directory() -> Path | None:
    """Where compiled objects are kept, or ``None`` when the cache is off."""
    if os.environ.get("EMBER_COMPILE_CACHE", "1").strip().lower() in ("0", "false", "off", "no"):
        return None
    root = os.environ.get("EMBER_CACHE_DIR")
    if root:
        return Path(root) / "llvm"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "ember" / "llvm"


def key(*parts: object) -> str:
    """The hex SHA-256 of ``parts`` (strings, ints, bools), each length-prefixed."""
    digest = hashlib.sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else str(part).encode()
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


#: The folders whose Python source emits recipe-keyed IR (with ``ember/backend``'s own
#: modules: ``ops``, ``philox``): any change to them changes :func:`source_digest`.
SOURCE_FOLDERS = ("kernel", "flex")
_SOURCE: list[str] = []


def source_digest() -> str:
    """A SHA-256 of the source of ember's kernel layer and flex backend (and of
    ``ember/backend``'s top-level modules), computed once per process: part of every
    recipe key, so that editing an emitter never loads machine code of the old one."""
    if not _SOURCE:
        backend = Path(__file__).resolve().parents[2]
        files = sorted(backend.glob("*.py"))
        for folder in SOURCE_FOLDERS:
            files += sorted((backend / folder).rglob("*.py"))
        digest = hashlib.sha256()
        for path in files:
            data = path.read_bytes()
            digest.update(str(path.relative_to(backend)).encode() + b"\0" + len(data).to_bytes(8, "little"))
            digest.update(data)
        _SOURCE.append(digest.hexdigest())
    return _SOURCE[0]


def load(name: str) -> bytes | None:
    """The object code kept under ``name``, or ``None`` (absent, damaged or cache off)."""
    folder = directory()
    if folder is None:
        return None
    path = folder / f"{name}.o"
    try:
        data = path.read_bytes()
    except OSError:
        return None
    head = len(_MAGIC) + _DIGEST
    payload = data[head:]
    if data[: len(_MAGIC)] != _MAGIC or hashlib.sha256(payload).digest() != data[len(_MAGIC) : head] or not payload:
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    return payload


def store(name: str, payload: bytes) -> None:
    """Keeps ``payload`` under ``name`` (atomically; nothing on any error)."""
    folder = directory()
    if folder is None or not payload:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, temporary = tempfile.mkstemp(dir=folder, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(_MAGIC + hashlib.sha256(payload).digest() + payload)
            os.replace(temporary, folder / f"{name}.o")
        except BaseException:
            os.unlink(temporary)
            raise
        _prune(folder)
    except OSError:
        return


def _prune(folder: Path) -> None:
    """Removes the oldest objects while the folder holds more than :data:`MAX_BYTES`."""
    entries = []
    for path in folder.glob("*.o"):
        try:
            info = path.stat()
        except OSError:
            continue
        entries.append((info.st_mtime, info.st_size, path))
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries, key=lambda e: e[0]):
        if total <= MAX_BYTES:
            break
        try:
            path.unlink()
            total -= size
        except OSError:
            continue
