"""``ArrayDataset``: rows of numpy arrays (features, targets, ...), from memory or CSV."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ember.data.dataset.base import Dataset, check_index, positions_in
from ember.errors import ConfigError, RecordError, ShapeError


class ArrayDataset(Dataset[tuple]):
    """Item ``i`` is ``(a[i], b[i], ...)`` for the given arrays (or ``a[i]`` alone
    for one array), as PyTorch's ``TensorDataset``.

    >>> import numpy as np
    >>> ds = ArrayDataset(np.zeros((3, 2)), np.array([0, 1, 2]))
    >>> len(ds), ds.get(2)[1]
    (3, np.int64(2))
    """

    def __init__(self, *arrays: Any):
        if not arrays:
            raise ConfigError("ember: ArrayDataset needs at least one array, e.g. ArrayDataset(features, targets)")
        self.arrays = tuple(np.asarray(a) for a in arrays)
        for i, a in enumerate(self.arrays):
            if a.ndim == 0:
                raise ShapeError(f"ember: ArrayDataset: array {i} is a scalar; give arrays with a first (item) dim")
        lengths = [a.shape[0] for a in self.arrays]
        if len(set(lengths)) > 1:
            shapes = ", ".join(str(list(a.shape)) for a in self.arrays)
            raise ShapeError(
                f"ember: ArrayDataset: the arrays have different numbers of items (shapes {shapes}); "
                "their first dims must agree"
            )

    def __len__(self) -> int:
        return self.arrays[0].shape[0]

    def get(self, index: int) -> Any:
        position = check_index(index)
        if position is None or not 0 <= position < len(self):
            return None
        if len(self.arrays) == 1:
            return self.arrays[0][position]
        return tuple(a[position] for a in self.arrays)

    def get_many(self, indices: Any) -> list[Any]:
        """``[get(i) for i in indices]``, each array indexed once."""
        positions = positions_in(indices, len(self))
        if positions is None:
            return [self.get(i) for i in indices]
        if len(self.arrays) == 1:
            return list(self.arrays[0][positions])
        return list(zip(*(a[positions] for a in self.arrays)))

    @classmethod
    def from_csv(
        cls,
        path: str | os.PathLike,
        target_columns: Sequence[str | int] | str | int | None = None,
        *,
        delimiter: str = ",",
        has_header: bool = True,
        dtype: Any = np.float32,
        target_dtype: Any = None,
    ) -> ArrayDataset:
        """A numeric CSV file as ``(features, targets)`` rows; ``target_columns`` (names
        or positions) go to the targets, every other column to the features.
        Targets keep ``target_dtype`` (default: int64 when every value is integral,
        else ``dtype``). Without targets, items are the feature rows alone."""
        path = Path(path)
        try:
            with path.open() as handle:
                header_line = handle.readline() if has_header else ""
            table = np.loadtxt(path, delimiter=delimiter, skiprows=1 if has_header else 0, dtype=np.float64, ndmin=2)
        except (OSError, ValueError) as error:
            raise RecordError(f"ember: ArrayDataset.from_csv: cannot read {path} as numbers: {error}") from None
        header = [name.strip() for name in header_line.strip().split(delimiter)] if has_header else []
        n_cols = table.shape[1]
        if target_columns is None:
            targets: list[int] = []
        else:
            wanted = [target_columns] if isinstance(target_columns, (str, int)) else list(target_columns)
            targets = []
            for column in wanted:
                if isinstance(column, str):
                    if column not in header:
                        raise ConfigError(
                            f"ember: ArrayDataset.from_csv: no column {column!r} in {path}; "
                            f"its columns are {', '.join(header) or '(no header)'}"
                        )
                    targets.append(header.index(column))
                elif not -n_cols <= column < n_cols:
                    raise ConfigError(
                        f"ember: ArrayDataset.from_csv: column {column} is out of range for {n_cols} columns"
                    )
                else:
                    targets.append(column % n_cols)
        features = table[:, [c for c in range(n_cols) if c not in targets]].astype(dtype)
        if not targets:
            return cls(features)
        y = table[:, targets]
        if target_dtype is None:
            target_dtype = np.int64 if np.all(np.mod(y, 1) == 0) else dtype
        y = y.astype(target_dtype)
        return cls(features, y[:, 0] if len(targets) == 1 else y)
