"""Vision datasets: MNIST from IDX files and image folders."""

from ember.data.vision.idx import read_idx, write_idx
from ember.data.vision.image_folder import ImageFolderDataset, ImageItem
from ember.data.vision.mnist import MnistDataset, MnistItem

__all__ = ["ImageFolderDataset", "ImageItem", "MnistDataset", "MnistItem", "read_idx", "write_idx"]
