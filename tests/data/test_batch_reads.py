"""Batch reads (``get_many``) against item-by-item reads, and the batch's seed
sequences against numpy's ``SeedSequence``."""

from __future__ import annotations

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
from ember.data.dataset.base import read_many
from ember.data.dataset.item_seeds import generator_of, item_states
from ember.data.dataset.transform import item_generator, reading_epoch
from ember.data.vision.transforms import RandomCrop

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
