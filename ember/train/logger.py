"""``FileMetricLogger``: every metric value, per iteration and per epoch, in CSV or
JSON Lines files of the artifact directory."""

from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path
from typing import Any

from ember.errors import ConfigError


def _clean(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return value


class FileMetricLogger:
    """Writes ``<directory>/train.<ext>`` and ``valid.<ext>`` (one row per iteration:
    epoch, iteration, items, then each metric's batch value) and ``epochs.<ext>``
    (one row per epoch and split with the epoch values). ``format`` is ``"csv"``
    or ``"jsonl"``. Rows are flushed as they are written."""

    def __init__(self, directory: str | os.PathLike, format: str = "csv"):
        if format not in ("csv", "jsonl"):
            raise ConfigError(f"ember: FileMetricLogger: format must be 'csv' or 'jsonl', got {format!r}")
        self.directory = Path(directory)
        self.format = format
        self.columns: dict[str, list[str]] = {}
        self._handles: dict[str, io.TextIOBase] = {}
        self._writers: dict[str, Any] = {}  # csv writers of the open files

    def path(self, stream: str) -> Path:
        return self.directory / f"{stream}.{self.format}"

    def start(self, columns: dict[str, list[str]], keep: dict[str, Any] | None = None) -> None:
        """Opens the files: ``columns`` maps each stream (``train``, ``valid``,
        ``epochs``) to its metric names. Without ``keep`` the files start empty;
        with it, rows written before the resumed position are kept (see
        :meth:`rewind`) and new rows are appended."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fixed = {
            "train": ["epoch", "iteration", "items"],
            "valid": ["epoch", "iteration", "items"],
            "epochs": ["epoch", "split"],
        }
        self.columns = {s: fixed[s] + list(names) for s, names in columns.items()}
        for stream, header in self.columns.items():
            path = self.path(stream)
            rows = self._read(path) if keep is not None and path.exists() else []
            if keep is not None:
                rows = [r for r in rows if _keep_row(stream, r, keep)]
            with path.open("w", newline="") as handle:
                if self.format == "csv":
                    writer = csv.DictWriter(handle, fieldnames=header, extrasaction="ignore")
                    writer.writeheader()
                    writer.writerows(rows)
                else:
                    for row in rows:
                        handle.write(json.dumps(row) + "\n")
            self._handles[stream] = path.open("a", newline="")
            self._writers.pop(stream, None)

    def _read(self, path: Path) -> list[dict[str, Any]]:
        try:
            if self.format == "csv":
                with path.open(newline="") as handle:
                    return list(csv.DictReader(handle))
            return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        except (OSError, ValueError):
            return []

    def log(self, stream: str, row: dict[str, Any]) -> None:
        handle = self._handles.get(stream)
        if handle is None:
            return
        if self.format == "csv":
            # DictWriter's row (a missing column or None empty, other keys ignored), by one writer per file.
            writer = self._writers.get(stream)
            if writer is None:
                writer = self._writers[stream] = csv.writer(handle)
            writer.writerow(["" if (v := _clean(row.get(k))) is None else v for k in self.columns[stream]])
        else:
            handle.write(json.dumps({k: _clean(v) for k, v in row.items()}) + "\n")
        handle.flush()

    def close(self) -> None:
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()
        self._writers.clear()


def _keep_row(stream: str, row: dict[str, Any], keep: dict[str, Any]) -> bool:
    """Whether a row was written before the checkpoint ``keep`` describes:
    ``{"epoch": e, "train_batches": b, "valid_done": bool}`` = epochs before ``e`` are
    complete, ``b`` training batches of epoch ``e`` are done, and its validation
    (and epoch rows) too if ``valid_done``."""
    try:
        epoch = int(row["epoch"])
    except (KeyError, TypeError, ValueError):
        return False
    if epoch != keep["epoch"]:
        return epoch < keep["epoch"]
    if stream == "train":
        return int(row.get("iteration") or 0) <= keep["train_batches"]
    return bool(keep["valid_done"])
