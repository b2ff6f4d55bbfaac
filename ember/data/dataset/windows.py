"""``WindowsDataset``: overlapping windows of consecutive items (sequences)."""

from __future__ import annotations

from typing import TypeVar

from ember.data.dataset.base import Dataset, as_dataset, check_index
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
        index = check_index(index)
        if index is None or not 0 <= index < len(self):
            return None
        return [self.dataset.get(index + k) for k in range(self.size)]
