"""Checksummed folders: a ``manifest.json`` naming the folder's format and version
and the SHA-256 of each of its files, written last and checked before anything is
read (the Learner's checkpoints and ``TrainingState`` both use it)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ember.errors import RecordError


def sha256(path: Path) -> str:
    """The hex SHA-256 of the file at ``path``, read in 1 MB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fsync_dir(path: Path) -> None:
    """Flushes a directory's entries (a rename into it is then durable)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def write_synced(path: Path, text: str) -> None:
    """Writes ``text`` to ``path`` and flushes it to disk."""
    with path.open("w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def write_manifest(folder: Path, fmt: str, version: int, files: tuple[str, ...], **extra: Any) -> None:
    """``folder/manifest.json`` with the format, version, ``extra`` entries and the
    checksum of each of ``files`` (already written in ``folder``)."""
    manifest = {"format": fmt, "version": version, **extra, "files": {name: sha256(folder / name) for name in files}}
    write_synced(folder / "manifest.json", json.dumps(manifest, indent=2))


def verify_manifest(
    folder: Path, *, fmt: str, version: int, files: tuple[str, ...], what: str, foreign: str, advice: str = ""
) -> dict[str, Any]:
    """The manifest of ``folder`` after checking its format, version and every file's
    checksum; a :class:`RecordError` naming the fault otherwise. ``what`` names such a
    folder in messages ("checkpoint"), ``foreign`` what another folder is not ("an
    ember learner checkpoint"), ``advice`` what to do (appended to each message)."""
    tail = f"; {advice}" if advice else ""
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
    except FileNotFoundError:
        raise RecordError(f"ember: {what} {folder} is incomplete: it has no manifest.json{tail}") from None
    except (OSError, ValueError) as error:
        raise RecordError(f"ember: {what} {folder} is corrupt: manifest.json is unreadable ({error}){tail}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != fmt:
        raise RecordError(f"ember: {folder} is not {foreign}{tail}")
    if manifest.get("version") != version:
        raise RecordError(
            f"ember: {what} {folder} has format version {manifest.get('version')!r}; this ember reads {version}{tail}"
        )
    checksums = manifest.get("files")
    checksums = checksums if isinstance(checksums, dict) else {}
    for name in files:
        path = folder / name
        if not path.is_file():
            raise RecordError(f"ember: {what} {folder} is corrupt: {name} is missing{tail}")
        if sha256(path) != checksums.get(name):
            raise RecordError(
                f"ember: {what} {folder} is corrupt: {name} does not match its checksum "
                f"(the file was changed or truncated after it was written){tail}"
            )
    return manifest
