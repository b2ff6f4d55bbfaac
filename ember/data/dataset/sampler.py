"""``SamplerDataset``: a random sample of another dataset, of any size."""

from __future__ import annotations

from typing import TypeVar

import numpy as np

from ember.data.dataset.base import Dataset, as_dataset, check_index
from ember.data.dataset.shuffled import check_seed
from ember.errors import ConfigError

T = TypeVar("T")


class SamplerDataset(Dataset[T]):
    """``size`` items drawn at random from ``dataset``: with replacement (each item
    independently) or without (successive permutations, so every item appears
    once before any repeats). Draws depend only on ``seed``, so item ``i`` is the
    same on every read, run and worker; use it to over- or under-sample.

    >>> from ember.data import InMemDataset
    >>> len(SamplerDataset(InMemDataset([1, 2, 3]), size=10, seed=0))
    10
    """

    def __init__(self, dataset: Dataset[T], size: int, *, replacement: bool = True, seed: int = 0):
        self.dataset = as_dataset("SamplerDataset", dataset)
        if check_index(size) is None or size < 0:
            raise ConfigError(f"ember: SamplerDataset: size must be an int >= 0, got {size!r}")
        n = len(self.dataset)
        if n == 0 and size > 0:
            raise ConfigError("ember: SamplerDataset: cannot draw items from an empty dataset")
        self.size = int(size)
        self.replacement = bool(replacement)
        self.seed = check_seed("SamplerDataset", seed)
        rng = np.random.Generator(np.random.PCG64(self.seed))
        if self.replacement:
            self.indices = rng.integers(0, max(n, 1), size=self.size)
        else:
            rounds = -(-self.size // n) if n else 0
            self.indices = np.concatenate([rng.permutation(n) for _ in range(rounds)] or [np.zeros(0, np.int64)])
            self.indices = self.indices[: self.size]

    def __len__(self) -> int:
        return self.size

    def get(self, index: int) -> T | None:
        position = check_index(index)
        if position is None or not 0 <= position < self.size:
            return None
        return self.dataset.get(int(self.indices[position]))
