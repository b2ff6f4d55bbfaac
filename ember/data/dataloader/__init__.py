"""Data loaders: batches of a dataset on a device."""

from ember.data.dataloader.builder import DataLoaderBuilder
from ember.data.dataloader.loader import DataLoader, DataLoaderIterator
from ember.data.dataloader.progress import Progress
from ember.data.dataloader.sampler import Sampler

__all__ = ["DataLoader", "DataLoaderBuilder", "DataLoaderIterator", "Progress", "Sampler"]
