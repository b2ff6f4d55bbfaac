"""Batch reads (``get_many``) against item-by-item reads, and the batch's seed
sequences against numpy's ``SeedSequence``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ember import Device
from ember.data import (
    ArrayDataset,
    DataLoaderBuilder,
    FnBatcher,
    InMemDataset,
    PartialDataset,
    ShuffledDataset,
    TransformDataset,
)
from ember.data.dataset import transform as transform_module
from ember.data.dataset.base import read_many
from ember.data.dataset.item_seeds import generator_of, item_states
from ember.data.dataset.transform import item_generator, reading_epoch
from ember.data.vision.transforms import Compose, RandomCrop, RandomHorizontalFlip, RandomVerticalFlip, ToCHW
from ember.errors import ConfigError

MAX32 = 2**32 - 1


@pytest.mark.parametrize("seed, epoch", [(0, 0), (42, 1), (MAX32, MAX32), (7, 123456), (1, 0)])
def test_item_states_are_numpys_seed_sequence_words(rng, seed, epoch):
    indices = np.concatenate([np.arange(40), rng.integers(0, 2**32, 40), [MAX32]])
    states = item_states(seed, epoch, indices)
    assert states is not None and states.shape == (81, 4) and states.dtype == np.uint64
    for words, index in zip(states, indices):
        oracle = np.random.SeedSequence([seed, epoch, int(index)]).generate_state(4, np.uint64)
        np.testing.assert_array_equal(words, oracle)
        drawn = generator_of(words)
        expected = item_generator(seed, epoch, int(index))
        assert drawn.integers(0, 1000, 6).tolist() == expected.integers(0, 1000, 6).tolist()
        assert drawn.random() == expected.random()


def test_numbers_beyond_one_word_are_left_to_numpy():
    assert item_states(2**32, 0, np.arange(3)) is None
    assert item_states(0, 2**40, np.arange(3)) is None
    assert item_states(0, 0, np.array([0, 2**32])) is None
    assert item_states(0, 0, np.arange(0)).shape == (0, 4)


def wrapped(arrays):
    base = ArrayDataset(*arrays)
    shuffled = ShuffledDataset(base, seed=5)
    return PartialDataset(shuffled, 3, 40)


@pytest.mark.parametrize("indices", [[0, 5, 2, 36], [], [1, 1, 1], [36, 37], [-1, 2], [2.0, 1]])
def test_get_many_reads_what_get_reads(rng, indices):
    images = rng.integers(0, 17, (45, 8, 8)).astype(np.float64)
    labels = rng.integers(0, 10, 45)
    for data in (wrapped((images, labels)), wrapped((images,))):
        many = data.get_many(indices)
        one_by_one = [data.get(i) if isinstance(i, int) else None for i in indices]
        assert len(many) == len(one_by_one)
        for a, b in zip(many, one_by_one):
            assert (a is None) == (b is None)
            if a is not None:
                for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
                    assert type(x) is type(y)
                    np.testing.assert_array_equal(x, y)


def test_a_transformed_batch_draws_what_single_reads_draw(rng):
    images = rng.integers(0, 17, (30, 8, 8)).astype(np.float64)
    data = TransformDataset(wrapped((images, np.arange(30) % 10)), RandomCrop(8, padding=1), seed=11)
    indices = np.array([4, 0, 9, 2, 20, 2])
    for epoch in (0, 3):
        with reading_epoch(epoch):
            many = data.get_many(indices)
            single = [data.get(int(i)) for i in indices]
        for (a, label_a), (b, label_b) in zip(many, single):
            np.testing.assert_array_equal(a, b)
            assert label_a == label_b
    # A dataset without get_many and an index out of range read item by item.
    plain = TransformDataset(InMemDataset([np.zeros((2, 2))] * 3), lambda x, r: x + r.random(), seed=1)
    assert [np.array_equal(a, b) for a, b in zip(plain.get_many([0, 2]), [plain.get(0), plain.get(2)])] == [True] * 2
    assert plain.get_many([0, 3])[1] is None
    assert read_many(InMemDataset([1, 2]), [1, 5]) == [2, None]


def test_a_loader_over_a_batch_read_dataset_gives_the_item_by_item_batches(rng):
    images = rng.integers(0, 17, (50, 8, 8)).astype(np.float64)

    class OneByOne:  # the same items, without get_many
        def __init__(self, data):
            self.data = data

        def __len__(self):
            return len(self.data)

        def get(self, index):
            return self.data.get(index)

    data = TransformDataset(wrapped((images, np.arange(50) % 10)), RandomCrop(8, padding=1), seed=2)
    batcher = FnBatcher(lambda items, device: np.stack([x for x, _ in items]))
    loaders = [
        DataLoaderBuilder(batcher).batch_size(8).shuffle(3).set_device(Device.flex()).build(d)
        for d in (data, OneByOne(data))
    ]
    for epoch in range(2):
        for a, b in zip(loaders[0].iter(epoch), loaders[1].iter(epoch), strict=True):
            np.testing.assert_array_equal(a, b)


def generators(n, seed=0):
    return [np.random.default_rng([seed, k]) for k in range(n)]


def assert_same_images(many, single):
    assert len(many) == len(single)
    for a, b in zip(many, single):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.float64])
@pytest.mark.parametrize("shape", [(6, 5), (6, 5, 3)])
@pytest.mark.parametrize(
    "crop",
    [
        RandomCrop(6, padding=1),
        RandomCrop((4, 3)),
        RandomCrop(5, padding=(0, 2, 3, 1), fill=3),
        RandomCrop(5, padding=2, fill=2.7),
        RandomCrop((9, 7), padding=1, pad_if_needed=True, fill=1),
        RandomCrop(6, padding=1, padding_mode="reflect"),  # item by item: a non-constant border
    ],
)
def test_random_crop_of_a_batch_is_item_by_item(rng, dtype, shape, crop):
    images = [(rng.random(shape) * 200).astype(dtype) for _ in range(7)]
    batch_rngs, single_rngs = generators(7), generators(7)
    with np.errstate(invalid="ignore", over="ignore"):
        many = crop.apply_many(images, batch_rngs)
        single = [crop(image, r) for image, r in zip(images, single_rngs)]
    assert_same_images(many, single)
    # Each item's generator drew what apply drew: the next draws agree.
    assert [r.random() for r in batch_rngs] == [r.random() for r in single_rngs]
    # The crops are copies: writing one leaves the dataset's image alone.
    before = images[0].copy()
    many[0][...] = 0
    np.testing.assert_array_equal(images[0], before)


def test_random_crop_of_mixed_or_too_small_batches(rng):
    mixed = [rng.random((6, 6)), rng.random((7, 6)), rng.random((6, 6)).astype(np.float32)]
    crop = RandomCrop(5, padding=1)
    assert_same_images(crop.apply_many(mixed, generators(3)), [crop(x, r) for x, r in zip(mixed, generators(3))])
    assert crop.apply_many([], []) == []
    with pytest.raises(ConfigError, match="larger than the"):
        RandomCrop(9).apply_many([rng.random((6, 6))] * 3, generators(3))


def test_compose_over_a_batch_draws_as_item_by_item(rng):
    augment = Compose(
        [RandomCrop(6, padding=2), RandomHorizontalFlip(), lambda x: x * 2, RandomVerticalFlip(0.3), ToCHW()]
    )
    images = [rng.integers(0, 256, (6, 6, 3)).astype(np.uint8) for _ in range(9)]
    many = augment.apply_many(images, generators(9, 4))
    assert_same_images(many, [augment(x, r) for x, r in zip(images, generators(9, 4))])


@dataclasses.dataclass
class Labelled:
    image: np.ndarray
    label: int


@pytest.mark.parametrize("kind", ["tuple", "list", "dataclass", "array", "whole", "empty"])
@pytest.mark.parametrize("batched", [True, False])  # the transform, or a plain function calling it
def test_a_batch_transform_reads_what_single_reads_read(rng, kind, batched, monkeypatch):
    images = rng.integers(0, 17, (12, 8, 8)).astype(np.float64)
    make = {
        "tuple": lambda k: (images[k], k),
        "list": lambda k: [images[k], k],
        "dataclass": lambda k: Labelled(images[k], k),
        "array": lambda k: images[k],
        "whole": lambda k: images[k],
        "empty": lambda k: () if k % 3 == 0 else (images[k], k),
    }[kind]
    items = InMemDataset([make(k) for k in range(12)])
    augment = Compose([RandomCrop(8, padding=1), RandomHorizontalFlip()])
    data = TransformDataset(items, augment if batched else lambda x, r: augment(x, r), seed=3)
    data.whole_item = kind == "whole"
    indices = np.array([5, 0, 11, 5, 2])
    for limit in (1 << 16, 4):  # seeds for the whole epoch at once, and per read (a larger dataset)
        monkeypatch.setattr(transform_module, "_EPOCH_STATES", limit)
        for epoch in (0, 2, 0):
            with reading_epoch(epoch):
                many = data.get_many(indices)
                single = [data.get(int(i)) for i in indices]
            for a, b in zip(many, single):
                assert type(a) is type(b)
                if kind in ("tuple", "list", "empty"):
                    assert len(a) == len(b) and a[1:] == b[1:]
                    a, b = (a[0], b[0]) if len(a) else (np.zeros(0), np.zeros(0))
                elif kind == "dataclass":
                    assert a.label == b.label
                    a, b = a.image, b.image
                np.testing.assert_array_equal(a, b)
