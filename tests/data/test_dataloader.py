"""DataLoader: batching, seeded order, resuming inside an epoch, worker prefetch."""

from __future__ import annotations

import threading
from collections import namedtuple

import numpy as np
import pytest

from ember import Device, Tensor
from ember.data import ArrayDataset, DataLoaderBuilder, DefaultBatcher, InMemDataset
from ember.errors import ConfigError, DeviceError, ShapeError


def ids_batcher(items, device):
    return Tensor.from_data(np.array(items, dtype=np.int64), device=device)


def epoch_ids(loader, epoch=None, start=0):
    return [b.tolist() for b in loader.iter(epoch, start)]


def test_batches_in_order_without_shuffle(flex):
    loader = DataLoaderBuilder(ids_batcher).batch_size(4).set_device(flex).build(list(range(10)))
    assert len(loader) == 3 and loader.num_items() == 10
    assert epoch_ids(loader) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert all(b.device is flex for b in loader)


def test_drop_last(flex):
    loader = DataLoaderBuilder(ids_batcher).batch_size(4).drop_last().set_device(flex).build(list(range(10)))
    assert len(loader) == 2 and loader.num_items() == 8 and epoch_ids(loader) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_shuffle_is_deterministic_per_seed_and_epoch(flex):
    def build(seed):
        return DataLoaderBuilder(ids_batcher).batch_size(8).shuffle(seed).set_device(flex).build(list(range(50)))

    a, b, c = build(1), build(1), build(2)
    first, second = epoch_ids(a), epoch_ids(a)  # epochs 0 and 1
    assert first == epoch_ids(b) and second == epoch_ids(b)
    assert first != second and first != epoch_ids(c)
    assert sorted(i for batch in first for i in batch) == list(range(50))
    assert epoch_ids(a, epoch=1) == second  # an explicit epoch reproduces its order


def test_resume_inside_an_epoch(flex):
    loader = DataLoaderBuilder(ids_batcher).batch_size(3).shuffle(5).set_device(flex).build(list(range(20)))
    full = epoch_ids(loader, epoch=4)
    assert epoch_ids(loader, epoch=4, start=3) == full[3:]
    it = loader.iter(epoch=4, start=3)
    assert it.progress().items_processed == 9 and it.progress().items_total == 20
    next(it)
    assert it.progress().items_processed == 12 and it.batch_index == 4


@pytest.mark.parametrize("workers", [1, 3])
def test_workers_give_the_same_batches(flex, workers):
    data = list(range(37))
    serial = DataLoaderBuilder(ids_batcher).batch_size(4).shuffle(9).set_device(flex).build(data)
    threaded = DataLoaderBuilder(ids_batcher).batch_size(4).shuffle(9).num_workers(workers).set_device(flex).build(data)
    for epoch in range(3):
        assert epoch_ids(serial, epoch) == epoch_ids(threaded, epoch)
    assert epoch_ids(serial, 2, start=5) == epoch_ids(threaded, 2, start=5)


def test_workers_prefetch_in_background(flex):
    """Batch 0 cannot finish until batch 1 has been built: only a worker running
    ahead of the consumer lets the first batch out."""
    batch_one_built = threading.Event()
    threads = []

    def batcher(items, device):
        threads.append(threading.current_thread().name)
        if items[0] == 0:
            assert batch_one_built.wait(timeout=20), "batch 1 was not prefetched while batch 0 was being built"
        if items[0] == 2:
            batch_one_built.set()
        return items

    loader = DataLoaderBuilder(batcher).batch_size(2).num_workers(2).set_device(flex).build(list(range(8)))
    assert list(loader) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert all(name.startswith("ember-data") for name in threads)


def test_worker_errors_reach_the_caller(flex):
    def batcher(items, device):
        if 4 in items:
            raise RuntimeError("bad item 4")
        return items

    loader = DataLoaderBuilder(batcher).batch_size(2).num_workers(2).set_device(flex).build(list(range(8)))
    with pytest.raises(RuntimeError, match="bad item 4"):
        list(loader)


def test_breaking_out_stops_the_workers(flex):
    loader = DataLoaderBuilder(ids_batcher).batch_size(1).num_workers(2).set_device(flex).build(list(range(100)))
    it = loader.iter(0)
    next(it)
    it.close()
    assert it._pool is None


def test_to_device_and_slice(flex):
    ad = flex.autodiff()
    loader = DataLoaderBuilder(ids_batcher).batch_size(2).set_device(flex).build(list(range(6)))
    moved = loader.to_device(ad)
    assert next(iter(moved)).device is ad and loader.device is flex
    assert epoch_ids(loader.slice(2, 5), 0) == [[2, 3], [4]]
    with pytest.raises(DeviceError, match="expected a Device"):
        loader.to_device("cpu")


def test_builder_errors(flex):
    builder = DataLoaderBuilder(ids_batcher)
    with pytest.raises(ConfigError, match="batch_size: expected an int >= 1, got 0"):
        builder.batch_size(0)
    with pytest.raises(ConfigError, match="num_workers"):
        builder.num_workers(-1)
    with pytest.raises(ConfigError, match="seed"):
        builder.shuffle("x")
    with pytest.raises(DeviceError):
        builder.set_device("flex")
    with pytest.raises(ConfigError, match="batcher"):
        DataLoaderBuilder(42)
    loader = builder.set_device(flex).build(list(range(4)))
    with pytest.raises(ConfigError, match="start must be a batch index"):
        loader.iter(0, start=10)


def test_dataset_returning_none_is_reported(flex):
    class Liar:
        def __len__(self):
            return 3

        def get(self, index):
            return None

    loader = DataLoaderBuilder(ids_batcher).batch_size(2).set_device(flex).build(Liar())
    with pytest.raises(ConfigError, match=r"Liar.get\(0\) returned None although len\(\) is 3"):
        next(iter(loader))


def test_default_batcher_structures(flex):
    Pair = namedtuple("Pair", ["x", "y"])
    items = [Pair(np.full(3, i, dtype=np.float64), i) for i in range(4)]
    batch = DefaultBatcher().batch(items, flex)
    assert isinstance(batch, Pair) and batch.x.dims() == [4, 3] and str(batch.x.dtype) == "float32"
    assert batch.y.tolist() == [0, 1, 2, 3] and str(batch.y.dtype) == "int64"
    dicts = DefaultBatcher().batch([{"a": 1.0, "name": "p"}, {"a": 2.0, "name": "q"}], flex)
    assert dicts["a"].tolist() == [1.0, 2.0] and dicts["name"] == ["p", "q"]
    tensors = DefaultBatcher().batch([Tensor.ones([2], device=flex), Tensor.zeros([2], device=flex)], flex)
    assert tensors.tolist() == [[1.0, 1.0], [0.0, 0.0]]
    images = DefaultBatcher().batch([np.zeros((2, 2), np.uint8)] * 3, flex)
    assert str(images.dtype) == "uint8"
    with pytest.raises(ShapeError, match=r"different shapes \(\[2\], \[3\]\)"):
        DefaultBatcher().batch([np.zeros(2), np.zeros(3)], flex)
    with pytest.raises(ShapeError, match="empty"):
        DefaultBatcher().batch([], flex)


def test_array_dataset_through_loader(flex):
    x = np.random.default_rng(0).normal(size=(10, 3))
    y = np.arange(10)
    loader = DataLoaderBuilder(DefaultBatcher()).batch_size(4).set_device(flex).build(ArrayDataset(x, y))
    xs, ys = zip(*loader)
    np.testing.assert_allclose(np.concatenate([b.to_numpy() for b in xs]), x.astype(np.float32))
    assert [i for b in ys for i in b.tolist()] == list(range(10))


def test_default_device(monkeypatch):
    loader = DataLoaderBuilder(ids_batcher).build(InMemDataset([1]))
    assert loader.device == Device.default()
