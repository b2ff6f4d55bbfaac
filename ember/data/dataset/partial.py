"""``PartialDataset``: the items ``[start, end)`` of another dataset."""

from __future__ import annotations

from typing import Any, TypeVar

from ember.data.dataset.base import Dataset, as_dataset, check_index, positions_in, read_many
from ember.errors import ConfigError

T = TypeVar("T")


class PartialDataset(Dataset[T]):
    """A window ``[start, end)`` on ``dataset`` (clamped to its length), e.g. a
    train/valid split of a shuffled dataset.

    >>> from ember.data import InMemDataset
    >>> list(PartialDataset(InMemDataset(range(10)), 2, 5))
    [2, 3, 4]
    """

    def __init__(self, dataset: Dataset[T], start: int, end: int):
        self.dataset = as_dataset("PartialDataset", dataset)
        for name, value in (("start", start), ("end", end)):
            if check_index(value) is None or value < 0:
                raise ConfigError(f"ember: PartialDataset: {name} must be an int >= 0, got {value!r}")
        if end < start:
            raise ConfigError(f"ember: PartialDataset: end ({end}) must not be below start ({start})")
        n = len(self.dataset)
        self.start = min(int(start), n)
        self.end = min(int(end), n)

    def __len__(self) -> int:
        return self.end - self.start

    def get(self, index: int) -> T | None:
        position = check_index(index)
        if position is None or not 0 <= position < len(self):
            return None
        return self.dataset.get(self.start + position)

    def get_many(self, indices: Any) -> list[T | None]:
        """``[get(i) for i in indices]``, read from the dataset as one batch."""
        positions = positions_in(indices, len(self))
        if positions is None:
            return [self.get(i) for i in indices]
        return read_many(self.dataset, positions + self.start)

    @staticmethod
    def split(dataset: Dataset[T], num: int) -> list[PartialDataset[T]]:
        """``num`` consecutive parts of (nearly) equal size, the first ones one item
        longer when the length does not divide evenly."""
        dataset = as_dataset("PartialDataset.split", dataset)
        if check_index(num) is None or num < 1:
            raise ConfigError(f"ember: PartialDataset.split: num must be an int >= 1, got {num!r}")
        n = len(dataset)
        size, extra = divmod(n, num)
        parts, start = [], 0
        for i in range(num):
            end = start + size + (1 if i < extra else 0)
            parts.append(PartialDataset(dataset, start, end))
            start = end
        return parts

    @staticmethod
    def split_fraction(dataset: Dataset[T], fraction: float) -> tuple[PartialDataset[T], PartialDataset[T]]:
        """``(first, rest)`` with ``round(fraction * len)`` items in ``first``."""
        dataset = as_dataset("PartialDataset.split_fraction", dataset)
        if not 0.0 <= fraction <= 1.0:
            raise ConfigError(f"ember: PartialDataset.split_fraction: fraction must lie in [0, 1], got {fraction}")
        n = len(dataset)
        cut = round(fraction * n)
        return PartialDataset(dataset, 0, cut), PartialDataset(dataset, cut, n)
