"""``MnistDataset``: MNIST's handwritten digits read from the four IDX files."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ember.data.dataset.base import Dataset, check_index
from ember.data.vision.idx import read_idx
from ember.errors import ConfigError, RecordError

_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


@dataclass(frozen=True)
class MnistItem:
    """One digit: ``image`` as float32 ``[28, 28]`` in ``[0, 255]`` and its ``label``."""

    image: np.ndarray
    label: int


def find_idx_file(root: Path, name: str) -> Path | None:
    """``name`` in ``root``, also as ``.gz`` or with the ``idx3.ubyte`` spelling."""
    dotted = name.replace("-idx", ".idx")
    for candidate in (name, dotted):
        for suffix in ("", ".gz"):
            path = root / f"{candidate}{suffix}"
            if path.is_file():
                return path
    return None


class MnistDataset(Dataset[MnistItem]):
    """The MNIST ``"train"`` (60000) or ``"test"`` (10000) split, read from the IDX
    files in ``root`` (``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
    ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``, optionally gzipped).
    ember downloads nothing: get the files once and point ``root`` at them.

    >>> train = MnistDataset.train("data/mnist")  # doctest: +SKIP
    >>> train.get(0).label  # doctest: +SKIP
    5
    """

    def __init__(self, root: str | os.PathLike, split: str = "train"):
        if split not in _FILES:
            raise ConfigError(f"ember: MnistDataset: split must be 'train' or 'test', got {split!r}")
        root = Path(root)
        paths = []
        for name in _FILES[split]:
            path = find_idx_file(root, name)
            if path is None:
                raise RecordError(
                    f"ember: MnistDataset: cannot find {name} (or {name}.gz) in {root.resolve()}; "
                    f"the {split} split needs {' and '.join(_FILES[split])}: download the MNIST IDX files "
                    "and pass the folder that holds them"
                )
            paths.append(path)
        images, labels = read_idx(paths[0]), read_idx(paths[1])
        if images.ndim != 3 or images.dtype != np.uint8:
            raise RecordError(
                f"ember: MnistDataset: {paths[0]} holds {images.dtype} values of shape {list(images.shape)}, "
                "expected uint8 images [n, rows, cols]"
            )
        if labels.ndim != 1 or labels.shape[0] != images.shape[0]:
            raise RecordError(
                f"ember: MnistDataset: {paths[1]} holds labels of shape {list(labels.shape)} for "
                f"{images.shape[0]} images in {paths[0]}; the files do not belong together"
            )
        self.split = split
        self.images = images
        self.labels = labels.astype(np.int64)

    @classmethod
    def train(cls, root: str | os.PathLike) -> MnistDataset:
        return cls(root, "train")

    @classmethod
    def test(cls, root: str | os.PathLike) -> MnistDataset:
        return cls(root, "test")

    def __len__(self) -> int:
        return self.images.shape[0]

    def get(self, index: int) -> MnistItem | None:
        position = check_index(index)
        if position is None or not 0 <= position < len(self):
            return None
        return MnistItem(self.images[position].astype(np.float32), int(self.labels[position]))
