"""Datasets and their transforms (Burn's ``burn-dataset``)."""

from ember.data.dataset.array import ArrayDataset
from ember.data.dataset.base import Dataset
from ember.data.dataset.composed import ComposedDataset
from ember.data.dataset.in_memory import InMemDataset
from ember.data.dataset.mapper import Mapper, MapperDataset
from ember.data.dataset.partial import PartialDataset
from ember.data.dataset.sampler import SamplerDataset
from ember.data.dataset.shuffled import ShuffledDataset
from ember.data.dataset.transform import TransformDataset
from ember.data.dataset.windows import WindowsDataset

__all__ = [
    "ArrayDataset",
    "ComposedDataset",
    "Dataset",
    "InMemDataset",
    "Mapper",
    "MapperDataset",
    "PartialDataset",
    "SamplerDataset",
    "ShuffledDataset",
    "TransformDataset",
    "WindowsDataset",
]
