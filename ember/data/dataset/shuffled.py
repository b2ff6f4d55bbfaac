"""``ShuffledDataset``: a fixed, seeded permutation of another dataset."""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np

from ember.data.dataset.base import Dataset, as_dataset, check_index, positions_in, read_many
from ember.errors import ConfigError

T = TypeVar("T")


def check_seed(op: str, seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"ember: {op}: the seed must be an int >= 0, got {seed!r}")
    return int(seed)


def permutation(n: int, seed: int, *stream: int) -> np.ndarray:
    """A permutation of ``range(n)`` that depends only on ``seed`` and ``stream``."""
    return np.random.Generator(np.random.PCG64([seed, *stream])).permutation(n)


class ShuffledDataset(Dataset[T]):
    """The items of ``dataset`` in an order drawn once from ``seed``: the same seed
    gives the same order on every run and platform.

    >>> from ember.data import InMemDataset
    >>> sorted(ShuffledDataset(InMemDataset([1, 2, 3]), seed=7)) == [1, 2, 3]
    True
    """

    def __init__(self, dataset: Dataset[T], seed: int):
        self.dataset = as_dataset("ShuffledDataset", dataset)
        self.seed = check_seed("ShuffledDataset", seed)
        self.indices = permutation(len(self.dataset), self.seed)

    def __len__(self) -> int:
        return len(self.indices)

    def get(self, index: int) -> T | None:
        position = check_index(index)
        if position is None or not 0 <= position < len(self.indices):
            return None
        return self.dataset.get(int(self.indices[position]))

    def get_many(self, indices: Any) -> list[T | None]:
        """``[get(i) for i in indices]``, read from the dataset as one batch."""
        positions = positions_in(indices, len(self))
        if positions is None:
            return [self.get(i) for i in indices]
        return read_many(self.dataset, self.indices[positions])
