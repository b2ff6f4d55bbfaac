"""``Sampler``: what a :class:`~ember.data.DataLoader` asks for the order of an epoch
when it is given one (``DataLoaderBuilder.sampler``), instead of shuffling itself.

``ember.distributed.DistributedSampler`` is the one that ships: it gives each rank
its own shard. Any object with these two methods works.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Sampler(Protocol):
    def order(self, num_items: int, epoch: int) -> np.ndarray:
        """The dataset indices epoch ``epoch`` reads, in order (a function of
        ``num_items`` and ``epoch`` only, so that resuming sees the same order)."""

    def num_samples(self, num_items: int) -> int:
        """``len(order(num_items, epoch))``, for any epoch."""
