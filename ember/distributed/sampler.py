"""``DistributedSampler``: each rank reads its own shard of the dataset."""

from __future__ import annotations

import numpy as np

from ember.data.dataset.base import check_index
from ember.data.dataset.shuffled import check_seed, permutation
from ember.errors import ConfigError


class DistributedSampler:
    """The shard of rank ``rank`` out of ``num_replicas`` (default: this process's
    world), for ``DataLoaderBuilder(...).sampler(DistributedSampler(...))``.

    Each epoch the dataset's indices are shuffled with ``(seed, epoch)`` (the same
    permutation a loader with ``.shuffle(seed)`` reads; ``shuffle=False`` keeps the
    dataset order), made a multiple of ``num_replicas`` long, and dealt out in turn:
    rank ``r`` reads positions ``r, r + N, r + 2N, ...``. So with a per-rank batch of
    ``b``, the ranks' ``k``-th batches together are exactly batch ``k`` of one process
    reading with batch size ``N * b``: data-parallel training sees the same global
    batches as single-process training.

    The tail: by default the order is padded by repeating its first indices
    (``pad=True``, every rank reads ``ceil(n / N)`` items); ``drop_last=True`` drops
    the last ``n % N`` indices instead. ``pad=False`` (with ``drop_last=False``) leaves
    the shards uneven, which suits evaluation (every item counted once) but not
    training, where every rank must run the same number of steps.

    >>> s = DistributedSampler(num_replicas=2, rank=1, shuffle=False)
    >>> s.order(5, epoch=0).tolist()
    [1, 3, 0]
    """

    def __init__(
        self,
        num_replicas: int | None = None,
        rank: int | None = None,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        pad: bool = True,
    ):
        if num_replicas is None or rank is None:
            from ember.distributed.world import communicator

            comm = communicator()
            num_replicas = comm.size if num_replicas is None else num_replicas
            rank = comm.rank if rank is None else rank
        if check_index(num_replicas) is None or num_replicas < 1:
            raise ConfigError(f"ember: DistributedSampler: num_replicas must be an int >= 1, got {num_replicas!r}")
        if check_index(rank) is None or not 0 <= rank < num_replicas:
            raise ConfigError(f"ember: DistributedSampler: rank must be an int in [0, {num_replicas}), got {rank!r}")
        self.num_replicas = int(num_replicas)
        self.rank = int(rank)
        self.shuffle = bool(shuffle)
        self.seed = check_seed("DistributedSampler", seed)
        self.drop_last = bool(drop_last)
        self.pad = bool(pad)

    def _total(self, n: int) -> int:
        """The length of the whole (padded or cut) order."""
        r = self.num_replicas
        if self.drop_last:
            return n - n % r
        if self.pad and n > 0:
            return -(-n // r) * r
        return n

    def num_samples(self, num_items: int) -> int:
        """How many items this rank reads per epoch."""
        total = self._total(num_items)
        return max(0, -(-(total - self.rank) // self.num_replicas))

    def order(self, num_items: int, epoch: int) -> np.ndarray:
        """This rank's indices for ``epoch``."""
        n = int(num_items)
        base = permutation(n, self.seed, epoch) if self.shuffle else np.arange(n, dtype=np.int64)
        total = self._total(n)
        if total > n:
            base = np.resize(base, total)  # repeats from the start
        return base[self.rank : total : self.num_replicas]

    def __repr__(self) -> str:
        return (
            f"DistributedSampler(num_replicas={self.num_replicas}, rank={self.rank}, shuffle={self.shuffle}, "
            f"seed={self.seed}, drop_last={self.drop_last}, pad={self.pad})"
        )
