"""``WindowsDataset``: overlapping windows of consecutive items (sequences)."""

from __future__ import annotations

from typing import TypeVar

from ember.data.dataset.base import Dataset, as_dataset, check_index, item_at
from ember.errors import ConfigError

T = TypeVar("T")


class WindowsDataset(Dataset[list[T]]):
    """Item ``i`` is ``[dataset[i], ..., dataset[i + size - 1]]``: ``len(dataset) -
    size + 1`` windows with stride 1 (none if the dataset is shorter than ``size``).

    >>> from ember.data import InMemDataset
    >>> list(WindowsDataset(InMemDataset([1, 2, 3, 4]), 3))
    [[1, 2, 3], [2, 3, 4]]
    """

    def __init__(self, dataset: Dataset[T], size: int):
        self.dataset = as_dataset("WindowsDataset", dataset)
        if check_index(size) is None or size < 1:
            raise ConfigError(f"ember: WindowsDataset: the window size must be an int >= 1, got {size!r}")
        self.size = int(size)

    def __len__(self) -> int:
        return max(len(self.dataset) - self.size + 1, 0)

    def get(self, index: int) -> list[T] | None:
        position = check_index(index)
        if position is None or not 0 <= position < len(self):
            return None
        return [item_at(self.dataset, position + k) for k in range(self.size)]
