"""``DataLoaderBuilder``: configures and builds a :class:`DataLoader` (Burn's builder)."""

from __future__ import annotations

from typing import Any

from ember.data.batcher import as_batcher
from ember.data.dataloader.loader import DataLoader
from ember.data.dataloader.sampler import Sampler
from ember.data.dataset.base import as_dataset, check_index
from ember.data.dataset.shuffled import check_seed
from ember.device import Device
from ember.errors import ConfigError, DeviceError


class DataLoaderBuilder:
    """``DataLoaderBuilder(batcher).batch_size(n).shuffle(seed).num_workers(k)
    .set_device(device).build(dataset)``.

    Defaults: batch size 1, no shuffling, no workers, ``Device.default()``. Each
    method returns the builder.

    >>> from ember.data import DefaultBatcher, InMemDataset
    >>> loader = DataLoaderBuilder(DefaultBatcher()).batch_size(2).shuffle(42).build(InMemDataset([1, 2, 3]))
    >>> len(loader)
    2
    """

    def __init__(self, batcher: Any):
        self._batcher = as_batcher("DataLoaderBuilder", batcher)
        self._batch_size = 1
        self._seed: int | None = None
        self._workers = 0
        self._prefetch: int | None = None
        self._device: Device | None = None
        self._drop_last = False
        self._sampler: Sampler | None = None

    def batch_size(self, batch_size: int) -> DataLoaderBuilder:
        if check_index(batch_size) is None or batch_size < 1:
            raise ConfigError(f"ember: DataLoaderBuilder.batch_size: expected an int >= 1, got {batch_size!r}")
        self._batch_size = int(batch_size)
        return self

    def shuffle(self, seed: int) -> DataLoaderBuilder:
        """Reshuffle every epoch, in an order drawn from ``seed`` and the epoch."""
        self._seed = check_seed("DataLoaderBuilder.shuffle", seed)
        return self

    def num_workers(self, num_workers: int) -> DataLoaderBuilder:
        """Build batches on ``num_workers`` background threads (0: in the caller)."""
        if check_index(num_workers) is None or num_workers < 0:
            raise ConfigError(f"ember: DataLoaderBuilder.num_workers: expected an int >= 0, got {num_workers!r}")
        self._workers = int(num_workers)
        return self

    def prefetch(self, batches: int) -> DataLoaderBuilder:
        """How many batches the workers build ahead (default ``2 * num_workers``)."""
        if check_index(batches) is None or batches < 1:
            raise ConfigError(f"ember: DataLoaderBuilder.prefetch: expected an int >= 1, got {batches!r}")
        self._prefetch = int(batches)
        return self

    def set_device(self, device: Device) -> DataLoaderBuilder:
        if not isinstance(device, Device):
            raise DeviceError(f"ember: DataLoaderBuilder.set_device: expected a Device, got {device!r}")
        self._device = device
        return self

    def drop_last(self, drop: bool = True) -> DataLoaderBuilder:
        """Skip the last batch when it is smaller than the batch size."""
        self._drop_last = bool(drop)
        return self

    def sampler(self, sampler: Sampler) -> DataLoaderBuilder:
        """Read each epoch in the order ``sampler`` gives (e.g.
        ``ember.distributed.DistributedSampler()``, one shard per rank) instead of
        shuffling here; the sampler does its own shuffling, so do not combine it with
        :meth:`shuffle`."""
        if not isinstance(sampler, Sampler):
            raise ConfigError(
                "ember: DataLoaderBuilder.sampler: expected a sampler with order(num_items, epoch) and "
                f"num_samples(num_items) (e.g. ember.distributed.DistributedSampler()), got {type(sampler).__name__}"
            )
        self._sampler = sampler
        return self

    def build(self, dataset: Any) -> DataLoader:
        dataset = as_dataset("DataLoaderBuilder.build", dataset)
        device = self._device if self._device is not None else Device.default()
        if self._sampler is not None and self._seed is not None:
            raise ConfigError(
                "ember: DataLoaderBuilder: shuffle(seed) and sampler(...) both decide the order; drop shuffle() and "
                "give the sampler the seed (DistributedSampler(seed=...) shuffles per epoch)"
            )
        return DataLoader(
            dataset,
            self._batcher,
            self._batch_size,
            device,
            shuffle_seed=self._seed,
            num_workers=self._workers,
            prefetch=self._prefetch,
            drop_last=self._drop_last,
            sampler=self._sampler,
        )
