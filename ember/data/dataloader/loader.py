"""``DataLoader``: batches of a dataset, in a seeded order, optionally prefetched by
worker threads. Build one with :class:`~ember.data.DataLoaderBuilder`."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, TypeVar

import numpy as np

from ember.data.batcher import Batcher
from ember.data.dataloader.progress import Progress
from ember.data.dataset.base import Dataset, check_index, read_many
from ember.data.dataset.shuffled import permutation
from ember.data.dataset.transform import reading_epoch
from ember.device import Device
from ember.errors import ConfigError, DeviceError

O = TypeVar("O")  # noqa: E741


class DataLoader(Generic[O]):
    """Iterating gives batches ``batcher.batch(items, device)``.

    With a shuffle seed, the order of epoch ``e`` is a permutation that depends only
    on ``(seed, e)``: two loaders with the same seed give the same batches, and a
    resumed training sees the same order as an uninterrupted one. ``iter()`` without
    an epoch counts the epochs itself (0, 1, ...). Datasets read while a batch of epoch
    ``e`` is built see ``e`` (a :class:`~ember.data.TransformDataset` draws its
    augmentation from it), on the workers too. With ``num_workers > 0`` batches
    are built ahead on background threads and still come out in order.
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        batcher: Batcher[Any, O],
        batch_size: int,
        device: Device,
        *,
        shuffle_seed: int | None = None,
        num_workers: int = 0,
        prefetch: int | None = None,
        drop_last: bool = False,
        sampler: Any = None,
    ):
        self.dataset = dataset
        self.batcher = batcher
        self.batch_size = batch_size
        self.device = device
        self.shuffle_seed = shuffle_seed
        self.num_workers = num_workers
        self.prefetch = prefetch if prefetch is not None else 2 * max(num_workers, 1)
        self.drop_last = drop_last
        self.sampler = sampler
        self._epoch = 0

    # ------------------------------------------------------------------ sizes
    def num_items(self) -> int:
        """The number of items one epoch reads (without a dropped last batch)."""
        n = self._epoch_items()
        return n - n % self.batch_size if self.drop_last else n

    def __len__(self) -> int:
        """The number of batches per epoch."""
        n = self._epoch_items()
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _epoch_items(self) -> int:
        n = len(self.dataset)
        return n if self.sampler is None else int(self.sampler.num_samples(n))

    def num_batches(self) -> int:
        return len(self)

    # ------------------------------------------------------------------ variants
    def to_device(self, device: Device) -> DataLoader[O]:
        """The same loader producing batches on ``device``."""
        if not isinstance(device, Device):
            raise DeviceError(f"ember: DataLoader.to_device: expected a Device, got {device!r}")
        return self._copy(device=device)

    def slice(self, start: int, end: int) -> DataLoader[O]:
        """A loader over the items ``[start, end)`` of the dataset."""
        from ember.data.dataset.partial import PartialDataset

        return self._copy(dataset=PartialDataset(self.dataset, start, end))

    def with_sampler(self, sampler: Any) -> DataLoader[O]:
        """The same loader reading each epoch in the order ``sampler`` gives (no
        shuffling of its own); ``None`` removes the sampler."""
        from ember.data.dataloader.sampler import Sampler

        if sampler is not None and not isinstance(sampler, Sampler):
            raise ConfigError(
                "ember: DataLoader.with_sampler: expected a sampler with order(num_items, epoch) and "
                f"num_samples(num_items), got {type(sampler).__name__}"
            )
        return self._copy(sampler=sampler, shuffle_seed=None)

    def _copy(self, **changes: Any) -> DataLoader[O]:
        fields = dict(
            dataset=self.dataset,
            batcher=self.batcher,
            batch_size=self.batch_size,
            device=self.device,
            shuffle_seed=self.shuffle_seed,
            num_workers=self.num_workers,
            prefetch=self.prefetch,
            drop_last=self.drop_last,
            sampler=self.sampler,
        )
        fields.update(changes)
        dataset, batcher, batch_size, device = (fields.pop(k) for k in ("dataset", "batcher", "batch_size", "device"))
        return DataLoader(dataset, batcher, batch_size, device, **fields)

    # ------------------------------------------------------------------ iteration
    def order(self, epoch: int) -> np.ndarray:
        """The dataset indices in the order epoch ``epoch`` reads them."""
        n = len(self.dataset)
        if self.sampler is not None:
            return np.asarray(self.sampler.order(n, epoch), dtype=np.int64)
        if self.shuffle_seed is None:
            return np.arange(n)
        return permutation(n, self.shuffle_seed, epoch)

    def batch_indices(self, epoch: int) -> list[np.ndarray]:
        """The dataset indices of every batch of epoch ``epoch``."""
        order = self.order(epoch)
        bs = self.batch_size
        return [order[i : i + bs] for i in range(0, self.num_items(), bs)]

    def iter(self, epoch: int | None = None, start: int = 0) -> DataLoaderIterator[O]:
        """An iterator over the batches of ``epoch`` (the next one if ``None``),
        starting at batch ``start`` (to resume an interrupted epoch)."""
        if epoch is None:
            epoch = self._epoch
            self._epoch += 1
        elif check_index(epoch) is None or epoch < 0:
            raise ConfigError(f"ember: DataLoader.iter: epoch must be an int >= 0, got {epoch!r}")
        if check_index(start) is None or not 0 <= start <= len(self):
            raise ConfigError(f"ember: DataLoader.iter: start must be a batch index in [0, {len(self)}], got {start!r}")
        return DataLoaderIterator(self, int(epoch), int(start))

    def __iter__(self) -> Iterator[O]:
        return self.iter()

    def _load(self, indices: np.ndarray, epoch: int = 0) -> O:
        with reading_epoch(epoch):
            items = self._read(self.dataset, indices)
        return self.batcher.batch(items, self.device)

    @staticmethod
    def _read(dataset: Dataset[Any], indices: np.ndarray) -> list[Any]:
        if getattr(dataset, "get_many", None) is not None:  # a batch read (see read_many)
            items = read_many(dataset, indices)
            if not any(item is None for item in items):
                return items
        items = []
        for index in indices:
            item = dataset.get(int(index))
            if item is None:
                raise ConfigError(
                    f"ember: DataLoader: {type(dataset).__name__}.get({int(index)}) returned None although "
                    f"len() is {len(dataset)}; get(index) must return an item for every index below len()"
                )
            items.append(item)
        return items

    def __repr__(self) -> str:
        return (
            f"DataLoader(items={len(self.dataset)}, batch_size={self.batch_size}, batches={len(self)}, "
            f"shuffle_seed={self.shuffle_seed}, "
            + (f"sampler={self.sampler!r}, " if self.sampler is not None else "")
            + f"num_workers={self.num_workers}, device={self.device!r})"
        )


class DataLoaderIterator(Iterator[O]):
    """Batches of one epoch; :meth:`progress` says how many items were read."""

    def __init__(self, loader: DataLoader[O], epoch: int, start: int):
        self.loader = loader
        self.epoch = epoch
        self._batches = loader.batch_indices(epoch)
        self._next = start
        self._items_done = sum(len(b) for b in self._batches[:start])
        self._items_total = loader.num_items()
        self._pool: ThreadPoolExecutor | None = None
        self._pending: collections.deque[Future] = collections.deque()
        self._submitted = start
        if loader.num_workers > 0 and start < len(self._batches):
            self._pool = ThreadPoolExecutor(max_workers=loader.num_workers, thread_name_prefix="ember-data")

    @property
    def batch_index(self) -> int:
        """The index of the next batch."""
        return self._next

    def progress(self) -> Progress:
        return Progress(self._items_done, self._items_total)

    def __len__(self) -> int:
        return len(self._batches) - self._next

    def __next__(self) -> O:
        if self._next >= len(self._batches):
            self.close()
            raise StopIteration
        indices = self._batches[self._next]
        if self._pool is None:
            batch = self.loader._load(indices, self.epoch)
        else:
            while self._submitted < len(self._batches) and len(self._pending) < self.loader.prefetch:
                self._pending.append(self._pool.submit(self.loader._load, self._batches[self._submitted], self.epoch))
                self._submitted += 1
            try:
                batch = self._pending.popleft().result()
            except BaseException:
                self.close()
                raise
        self._next += 1
        self._items_done += len(indices)
        return batch

    def close(self) -> None:
        """Stops the workers (pending batches are dropped)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            for future in self._pending:
                future.cancel()
            self._pending.clear()
            pool.shutdown(wait=False, cancel_futures=True)

    def __del__(self) -> None:
        self.close()
