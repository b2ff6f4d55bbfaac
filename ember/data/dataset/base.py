"""The ``Dataset`` protocol (Burn's ``Dataset`` trait): ``len(dataset)`` items,
read one at a time with ``dataset.get(index)``.

Any object with ``__len__`` and ``get`` is a dataset (``isinstance(obj, Dataset)``
holds for it); subclassing :class:`Dataset` adds Python idiom on top:
``dataset[i]`` (negative indices, ``IndexError``), iteration and ``is_empty()``.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from typing import Any, Generic, TypeVar, cast

import numpy as np

from ember.errors import ConfigError, IndexOutOfBoundsError

T = TypeVar("T")


class Dataset(abc.ABC, Generic[T]):
    """A finite, indexable collection of items.

    Implement ``__len__`` and ``get(index)``; ``get`` returns ``None`` for an index
    outside ``[0, len)`` (as Burn's ``Option``), ``dataset[index]`` raises instead.

    >>> class Squares(Dataset):
    ...     def __len__(self): return 4
    ...     def get(self, index): return index * index if 0 <= index < 4 else None
    >>> list(Squares()), Squares()[-1]
    ([0, 1, 4, 9], 9)
    """

    @abc.abstractmethod
    def __len__(self) -> int:
        """The number of items."""

    @abc.abstractmethod
    def get(self, index: int) -> T | None:
        """The item at ``index``, or ``None`` if ``index`` is outside ``[0, len)``."""

    @classmethod
    def __subclasshook__(cls, other: type) -> Any:
        if cls is Dataset:
            names = ("__len__", "get")
            if all(any(name in base.__dict__ for base in other.__mro__) for name in names):
                return True
        return NotImplemented

    def len(self) -> int:
        """``len(self)`` (Burn's name)."""
        return len(self)

    def is_empty(self) -> bool:
        return len(self) == 0

    def __getitem__(self, index: int) -> T:
        n = len(self)
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise IndexOutOfBoundsError(
                f"ember: {type(self).__name__}[{index!r}]: the index must be an int; "
                "wrap the dataset in PartialDataset for a range"
            )
        position = int(index) + n if index < 0 else int(index)
        if not 0 <= position < n:
            raise IndexOutOfBoundsError(
                f"ember: {type(self).__name__}[{index}]: index out of range for a dataset of {n} items"
            )
        return item_at(self, position)

    def __iter__(self) -> Iterator[T]:
        for index in range(len(self)):
            yield item_at(self, index)

    def iter(self) -> Iterator[T]:
        """Every item in order (Burn's ``iter``)."""
        return iter(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(len={len(self)})"


def item_at(dataset: Dataset[T], index: int) -> T:
    """``dataset.get(index)`` for an ``index`` already known to be in ``[0, len)``: there
    ``get`` returns an item (its ``None`` only marks an index out of range), so the
    result is typed as the item (not checked, as ``dataset[index]`` never checked it)."""
    return cast(T, dataset.get(index))


def read_many(dataset: Any, indices: Any) -> list[Any]:
    """``[dataset.get(i) for i in indices]`` (``None`` for an index out of range),
    through the dataset's ``get_many`` where it has one: a batch read that maps the
    indices as arrays (the wrappers of this package) instead of item by item."""
    get_many = getattr(dataset, "get_many", None)
    if get_many is not None:
        return get_many(indices)
    return [dataset.get(int(i) if isinstance(i, np.integer) else i) for i in indices]


def positions_in(indices: Any, n: int) -> np.ndarray | None:
    """``indices`` as an int64 array when they all are integer positions in ``[0, n)``,
    else ``None`` (a ``get_many`` then reads item by item, each bad index giving ``None``)."""
    array = np.asarray(indices)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        return None
    if array.size and (int(array.min()) < 0 or int(array.max()) >= n):
        return None
    return array.astype(np.int64, copy=False)


def check_index(index: Any) -> int | None:
    """``index`` as a Python int, or ``None`` when it cannot index an item."""
    if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
        return None
    return int(index)


def as_dataset(op: str, value: Any) -> Dataset:
    """``value`` as a dataset: datasets pass through, sequences and arrays are
    wrapped in an :class:`~ember.data.InMemDataset`."""
    if isinstance(value, Dataset):
        return value
    if isinstance(value, (Sequence, np.ndarray)) and not isinstance(value, (str, bytes)):
        from ember.data.dataset.in_memory import InMemDataset

        return InMemDataset(value)
    raise ConfigError(
        f"ember: {op}: expected a dataset (an object with __len__ and get(index)), a list or an array, "
        f"got {type(value).__name__}"
    )
