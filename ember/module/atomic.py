"""Atomic file writes: a temporary file in the target's folder, flushed, then renamed
over the target. A crash or an error mid-write leaves the old file (or none) and no
partial one."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> None:
    """Calls ``write(temporary_path)``, syncs the file, then renames it to ``path``."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w") as handle:
            handle.write(text)

    atomic_write(path, write)
