"""``TransformDataset``: a random transform (an augmentation) applied to every item,
with a generator derived from ``(seed, epoch, index)``.

The epoch is the one of the :class:`~ember.data.DataLoader` batch being built (the
loader passes it down to every dataset it reads, on its workers too), or, for reads
outside a loader, the one given to :meth:`TransformDataset.set_epoch` (0 at first).
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np

from ember.data.dataset.base import Dataset, as_dataset, check_index, positions_in, read_many
from ember.data.dataset.item_seeds import generator_of, item_states
from ember.data.dataset.shuffled import check_seed
from ember.errors import ConfigError

T = TypeVar("T")

_LOADER_EPOCH: contextvars.ContextVar[int | None] = contextvars.ContextVar("ember_data_epoch", default=None)


def loader_epoch() -> int | None:
    """The epoch of the DataLoader batch being built on this thread, ``None`` outside one."""
    return _LOADER_EPOCH.get()


@contextmanager
def reading_epoch(epoch: int) -> Iterator[None]:
    """Reads inside the block belong to ``epoch`` (what the DataLoader does around each batch)."""
    token = _LOADER_EPOCH.set(int(epoch))
    try:
        yield
    finally:
        _LOADER_EPOCH.reset(token)


def item_generator(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The generator of item ``index`` in ``epoch``: a function of the three numbers only,
    so draws do not depend on the number of workers or the order items are read in."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch, index])))


class TransformDataset(Dataset[T]):
    """``transform(image, rng)`` applied to each item of ``dataset`` when it is read,
    ``rng`` a numpy ``Generator`` derived from ``(seed, epoch, index)``: a run is the
    same with any number of workers (and when resumed), and each epoch draws anew.

    The transform gets the item's image: ``item[0]`` of a tuple or list item (the rest
    is kept), ``item.image`` of a dataclass item (``ImageItem``, ``MnistItem``), the
    item itself otherwise. ``transform`` is any callable ``(image, rng)``, e.g. an
    ``ember.data.vision.transforms.Compose``; with ``whole_item=True`` it gets the
    whole item instead. A transform with an ``apply_many(images, rngs)`` method (the
    vision transforms) gets a loader's batch in one call, each image with its item's
    generator.

    >>> from ember.data import InMemDataset
    >>> ds = TransformDataset(InMemDataset([0.0, 0.0]), lambda x, rng: x + rng.random(), seed=1)
    >>> a = list(ds); ds.set_epoch(1); b = list(ds)
    >>> a != b, a == list(TransformDataset(InMemDataset([0.0, 0.0]), lambda x, rng: x + rng.random(), seed=1))
    (True, True)
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        transform: Callable[[Any, np.random.Generator], Any],
        seed: int = 0,
        *,
        whole_item: bool = False,
    ):
        self.dataset = as_dataset("TransformDataset", dataset)
        if not callable(transform):
            raise ConfigError(
                f"ember: TransformDataset: the transform must be callable as transform(image, rng), "
                f"got {type(transform).__name__}"
            )
        self.transform = transform
        self.seed = check_seed("TransformDataset", seed)
        self.whole_item = bool(whole_item)
        self.epoch = 0
        self._epoch_states: tuple[tuple[int, int, int], np.ndarray | None] | None = None

    def set_epoch(self, epoch: int) -> None:
        """The epoch of reads outside a DataLoader (inside one, the loader's epoch counts)."""
        if check_index(epoch) is None or epoch < 0:
            raise ConfigError(f"ember: TransformDataset.set_epoch: expected an int >= 0, got {epoch!r}")
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.dataset)

    def get(self, index: int) -> T | None:
        position = check_index(index)
        if position is None or not 0 <= position < len(self):
            return None
        item = self.dataset.get(position)
        if item is None:
            return None
        epoch = loader_epoch()
        rng = item_generator(self.seed, self.epoch if epoch is None else epoch, position)
        return self._apply(item, rng)

    def get_many(self, indices: np.ndarray) -> list[T | None]:
        """``[get(i) for i in indices]`` (what a DataLoader reads for a batch), with the
        items' generators seeded together (:mod:`~ember.data.dataset.item_seeds`): the
        same draws, without hashing each item's seed sequence on its own."""
        positions = positions_in(indices, len(self))
        epoch = loader_epoch()
        states = None if positions is None else self._states(self.epoch if epoch is None else epoch, positions)
        if positions is None or states is None:
            return [self.get(i) for i in indices]
        items = read_many(self.dataset, positions)
        fn = self.transform
        # A batch transform gets the images of the items that have one in one call; a
        # plain callable, each image in turn.
        apply_many = getattr(fn, "apply_many", None) or (lambda xs, rngs: [fn(x, r) for x, r in zip(xs, rngs)])
        present, images = [], []
        for k, item in enumerate(items):
            image = _NO_IMAGE if item is None else self._image_of(item)
            if image is not _NO_IMAGE:
                present.append(k)
                images.append(image)
        images = apply_many(images, [generator_of(states[k]) for k in present])
        out = list(items)
        for k, image in zip(present, images):
            out[k] = image if self.whole_item else _with_image(items[k], image)
        return out

    def _states(self, epoch: int, positions: np.ndarray) -> np.ndarray | None:
        """The seed words of ``positions`` in ``epoch`` (:func:`item_states`), computed once
        per epoch for all the items of a dataset of up to ``_EPOCH_STATES`` items
        (32 bytes each) and per read otherwise."""
        n = len(self)
        if n > _EPOCH_STATES:
            return item_states(self.seed, epoch, positions)
        key = (self.seed, epoch, n)
        cached = self._epoch_states  # one read: workers may replace it meanwhile
        if cached is None or cached[0] != key:
            cached = (key, item_states(self.seed, epoch, np.arange(n)))
            self._epoch_states = cached
        return None if cached[1] is None else cached[1][positions]

    def _image_of(self, item: Any) -> Any:
        """What the transform gets of ``item`` (``_NO_IMAGE`` for an empty tuple or list: kept as is)."""
        if self.whole_item:
            return item
        if (isinstance(item, tuple) and not hasattr(item, "_fields")) or isinstance(item, list):
            return item[0] if item else _NO_IMAGE
        if dataclasses.is_dataclass(item) and not isinstance(item, type) and hasattr(item, "image"):
            return item.image
        return item

    def _apply(self, item: Any, rng: np.random.Generator) -> Any:
        image = self._image_of(item)
        if image is _NO_IMAGE:
            return item
        out = self.transform(image, rng)
        return out if self.whole_item else _with_image(item, out)


_NO_IMAGE = object()
#: Datasets of up to this many items get their seed words for a whole epoch at once.
_EPOCH_STATES = 1 << 16


def _with_image(item: Any, image: Any) -> Any:
    """``item`` with the transformed ``image`` in the place :meth:`TransformDataset._image_of` took it from."""
    if isinstance(item, tuple) and not hasattr(item, "_fields"):
        return (image, *item[1:])
    if isinstance(item, list):
        return [image, *item[1:]]
    if dataclasses.is_dataclass(item) and not isinstance(item, type) and hasattr(item, "image"):
        return dataclasses.replace(item, image=image)
    return image
