"""``ComposedDataset``: several datasets read one after the other."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TypeVar

from ember.data.dataset.base import Dataset, as_dataset, check_index

T = TypeVar("T")


class ComposedDataset(Dataset[T]):
    """The items of each dataset in turn (a concatenation).

    >>> from ember.data import InMemDataset
    >>> list(ComposedDataset([InMemDataset([1, 2]), InMemDataset([3])]))
    [1, 2, 3]
    """

    def __init__(self, datasets: Sequence[Dataset[T]]):
        self.datasets = [as_dataset("ComposedDataset", d) for d in datasets]
        self._ends: list[int] = []
        total = 0
        for dataset in self.datasets:
            total += len(dataset)
            self._ends.append(total)

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def get(self, index: int) -> T | None:
        position = check_index(index)
        if position is None or not 0 <= position < len(self):
            return None
        part = bisect.bisect_right(self._ends, position)
        start = self._ends[part - 1] if part else 0
        return self.datasets[part].get(position - start)
