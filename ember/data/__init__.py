"""``ember.data``: datasets, their transforms, batchers and data loaders (Burn's
``burn-dataset`` and ``burn-core::data``).

>>> import numpy as np
>>> from ember import Device
>>> from ember.data import ArrayDataset, DataLoaderBuilder, DefaultBatcher, ShuffledDataset
>>> ds = ShuffledDataset(ArrayDataset(np.random.default_rng(0).random((10, 3)), np.arange(10)), seed=0)
>>> loader = DataLoaderBuilder(DefaultBatcher()).batch_size(4).shuffle(1).set_device(Device.flex()).build(ds)
>>> [x.dims() for x, y in loader]
[[4, 3], [4, 3], [2, 3]]
"""

from ember.data.batcher import Batcher, DefaultBatcher, FnBatcher
from ember.data.dataloader import DataLoader, DataLoaderBuilder, DataLoaderIterator, Progress, Sampler
from ember.data.dataset import (
    ArrayDataset,
    ComposedDataset,
    Dataset,
    InMemDataset,
    Mapper,
    MapperDataset,
    PartialDataset,
    SamplerDataset,
    ShuffledDataset,
    TransformDataset,
    WindowsDataset,
)
from ember.data.vision import ImageFolderDataset, ImageItem, MnistDataset, MnistItem, read_idx, write_idx

__all__ = [
    "ArrayDataset",
    "Batcher",
    "ComposedDataset",
    "DataLoader",
    "DataLoaderBuilder",
    "DataLoaderIterator",
    "Dataset",
    "DefaultBatcher",
    "FnBatcher",
    "ImageFolderDataset",
    "ImageItem",
    "InMemDataset",
    "Mapper",
    "MapperDataset",
    "MnistDataset",
    "MnistItem",
    "PartialDataset",
    "Progress",
    "Sampler",
    "SamplerDataset",
    "ShuffledDataset",
    "TransformDataset",
    "WindowsDataset",
    "read_idx",
    "write_idx",
]
