"""``MapperDataset``: applies a function to every item, lazily."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

from ember.data.dataset.base import Dataset, as_dataset
from ember.errors import ConfigError

I = TypeVar("I")  # noqa: E741
O = TypeVar("O")  # noqa: E741
I_contra = TypeVar("I_contra", contravariant=True)
O_co = TypeVar("O_co", covariant=True)


@runtime_checkable
class Mapper(Protocol[I_contra, O_co]):
    """Burn's ``Mapper``: an object whose ``map(item)`` returns the new item."""

    def map(self, item: I_contra) -> O_co: ...


class MapperDataset(Dataset[O]):
    """``mapper(item)`` (or ``mapper.map(item)``) for each item of ``dataset``, computed
    when the item is read (a transform or an augmentation).

    >>> from ember.data import InMemDataset
    >>> list(MapperDataset(InMemDataset([1, 2]), lambda x: 10 * x))
    [10, 20]
    """

    def __init__(self, dataset: Dataset[I], mapper: Mapper[I, O] | Callable[[I], O]):
        self.dataset = as_dataset("MapperDataset", dataset)
        if isinstance(mapper, Mapper):
            self._fn: Callable[[Any], Any] = mapper.map
        elif callable(mapper):
            self._fn = mapper
        else:
            raise ConfigError(
                f"ember: MapperDataset: the mapper must be a function or have a map(item) method, "
                f"got {type(mapper).__name__}"
            )
        self.mapper = mapper

    def __len__(self) -> int:
        return len(self.dataset)

    def get(self, index: int) -> O | None:
        item = self.dataset.get(index)
        return None if item is None else self._fn(item)
