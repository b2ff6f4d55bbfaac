"""``InMemDataset``: items held in a Python list, read from memory, CSV or JSON rows."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from ember.data.dataset.base import Dataset, check_index, item_at
from ember.errors import RecordError

T = TypeVar("T")


class InMemDataset(Dataset[T]):
    """A dataset over items held in memory.

    >>> InMemDataset(["a", "b", "c"]).get(1)
    'b'
    """

    def __init__(self, items: Iterable[T]):
        self._items = list(items)

    def __len__(self) -> int:
        return len(self._items)

    def get(self, index: int) -> T | None:
        position = check_index(index)
        if position is None or not 0 <= position < len(self._items):
            return None
        return self._items[position]

    @property
    def items(self) -> list[T]:
        return self._items

    @classmethod
    def from_dataset(cls, dataset: Dataset[T]) -> InMemDataset[T]:
        """Reads every item of ``dataset`` into memory (e.g. to cache a slow source)."""
        return cls(item_at(dataset, i) for i in range(len(dataset)))

    @classmethod
    def from_csv(
        cls,
        path: str | os.PathLike,
        row_type: Callable[..., T] | None = None,
        *,
        delimiter: str = ",",
        has_header: bool = True,
    ) -> InMemDataset:
        """Rows of a CSV file as dicts ``{column: value}`` (numbers parsed as int or
        float, other fields kept as text), or as ``row_type(**row)`` when given (a
        dataclass, a named tuple, ...). Without a header, columns are named ``"0"``,
        ``"1"``, ...

        >>> InMemDataset.from_csv("rows.csv").get(0)  # doctest: +SKIP
        {'x': 0.5, 'label': 1}
        """
        path = Path(path)
        try:
            with path.open(newline="") as handle:
                reader = csv.reader(handle, delimiter=delimiter)
                rows = [row for row in reader if row]
        except OSError as error:
            raise RecordError(f"ember: InMemDataset.from_csv: cannot read {path}: {error}") from None
        if has_header:
            if not rows:
                raise RecordError(f"ember: InMemDataset.from_csv: {path} is empty but has_header=True")
            header, rows = [name.strip() for name in rows[0]], rows[1:]
        else:
            header = [str(i) for i in range(len(rows[0]))] if rows else []
        items = []
        for line, row in enumerate(rows, start=2 if has_header else 1):
            if len(row) != len(header):
                raise RecordError(
                    f"ember: InMemDataset.from_csv: {path} line {line} has {len(row)} fields, "
                    f"the header has {len(header)} ({', '.join(header)}); check the delimiter {delimiter!r}"
                )
            values = {name: parse_field(value) for name, value in zip(header, row)}
            items.append(_build(row_type, values, f"{path} line {line}"))
        return cls(items)

    @classmethod
    def from_json_rows(cls, path: str | os.PathLike, row_type: Callable[..., T] | None = None) -> InMemDataset:
        """One JSON object per line (JSON Lines), as dicts or ``row_type(**row)``."""
        path = Path(path)
        try:
            lines = path.read_text().splitlines()
        except OSError as error:
            raise RecordError(f"ember: InMemDataset.from_json_rows: cannot read {path}: {error}") from None
        items = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as error:
                raise RecordError(
                    f"ember: InMemDataset.from_json_rows: {path} line {number} is not valid JSON: {error}"
                ) from None
            items.append(_build(row_type, value, f"{path} line {number}"))
        return cls(items)


def parse_field(text: str) -> int | float | str:
    """A CSV field as an int, a float, or the text itself."""
    stripped = text.strip()
    for kind in (int, float):
        try:
            return kind(stripped)
        except ValueError:
            pass
    return text


def _build(row_type: Callable[..., Any] | None, values: Any, where: str) -> Any:
    if row_type is None:
        return values
    try:
        return row_type(**values) if isinstance(values, dict) else row_type(values)
    except TypeError as error:
        raise RecordError(
            f"ember: cannot build {getattr(row_type, '__name__', row_type)} from {where}: {error}"
        ) from None
