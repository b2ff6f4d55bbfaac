"""Vision transforms as torchvision users know them, on numpy images.

Geometric and colour transforms take HWC arrays (``[height, width, channels]`` or
``[height, width]``), uint8 in ``[0, 255]`` or float in ``[0, 1]``, and keep the dtype;
PIL images are converted to uint8 HWC arrays. :class:`ToCHW` turns the result into
float32 CHW (torchvision's ``ToTensor``) for :class:`Normalize`. A random transform
draws from the ``rng`` it is called with; wrapped in a
:class:`~ember.data.TransformDataset` that is a generator of ``(seed, epoch, index)``,
so augmentation is reproducible with any number of workers and new every epoch.

>>> import numpy as np
>>> from ember.data import InMemDataset, TransformDataset
>>> from ember.data.vision.transforms import Compose, Normalize, RandomCrop, RandomHorizontalFlip, ToCHW
>>> augment = Compose([RandomCrop(32, padding=4), RandomHorizontalFlip(), ToCHW(), Normalize([0.5] * 3, [0.25] * 3)])
>>> images = InMemDataset([np.zeros((32, 32, 3), np.uint8)] * 4)
>>> TransformDataset(images, augment, seed=0)[0].shape
(3, 32, 32)
"""

from ember.data.vision.transforms.augment import OPS, RandAugment
from ember.data.vision.transforms.base import Compose, ToCHW, Transform, as_array
from ember.data.vision.transforms.color import ColorJitter, Normalize
from ember.data.vision.transforms.geometry import (
    CenterCrop,
    RandomCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomVerticalFlip,
    Resize,
    resize,
)

__all__ = [
    "OPS",
    "CenterCrop",
    "ColorJitter",
    "Compose",
    "Normalize",
    "RandAugment",
    "RandomCrop",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "RandomVerticalFlip",
    "Resize",
    "ToCHW",
    "Transform",
    "as_array",
    "resize",
]
