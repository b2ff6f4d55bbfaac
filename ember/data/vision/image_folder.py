"""``ImageFolderDataset``: images sorted into one folder per class (needs Pillow)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ember.data.dataset.base import Dataset, check_index
from ember.errors import ConfigError, RecordError

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")


@dataclass(frozen=True)
class ImageItem:
    """An image as a uint8 array ``[height, width, channels]``, its class index and file."""

    image: np.ndarray
    label: int
    path: Path


def _pillow():
    try:
        from PIL import Image
    except ImportError:
        raise ImportError(
            "ember: ImageFolderDataset reads images with Pillow, which is not installed: pip install Pillow"
        ) from None
    return Image


class ImageFolderDataset(Dataset[ImageItem]):
    """``root/<class name>/<image file>``: classes are the sub-folders in sorted order
    (label ``i`` is ``classes[i]``), images are read when an item is read.

    ``mode`` converts every image (``"RGB"``, ``"L"`` for grayscale, ``"RGBA"``, or
    ``None`` to keep each file's mode); ``size=(height, width)`` resizes.

    >>> ds = ImageFolderDataset("data/flowers", size=(64, 64))  # doctest: +SKIP
    >>> ds.classes, ds.get(0).image.shape  # doctest: +SKIP
    (['daisy', 'rose'], (64, 64, 3))
    """

    def __init__(
        self,
        root: str | os.PathLike,
        *,
        mode: str | None = "RGB",
        size: tuple[int, int] | None = None,
        extensions: Sequence[str] = IMAGE_EXTENSIONS,
    ):
        self.root = Path(root)
        if not self.root.is_dir():
            raise RecordError(f"ember: ImageFolderDataset: {self.root} is not a folder")
        if size is not None and (len(size) != 2 or any(int(s) <= 0 for s in size)):
            raise ConfigError(f"ember: ImageFolderDataset: size must be (height, width) > 0, got {size!r}")
        _pillow()
        self.mode = mode
        self.size = None if size is None else (int(size[0]), int(size[1]))
        extensions = tuple(e.lower() if e.startswith(".") else f".{e.lower()}" for e in extensions)
        self.classes = sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))
        self.class_to_index = {name: i for i, name in enumerate(self.classes)}
        self.samples: list[tuple[Path, int]] = []
        for name in self.classes:
            files = sorted(p for p in (self.root / name).rglob("*") if p.is_file() and p.suffix.lower() in extensions)
            self.samples.extend((p, self.class_to_index[name]) for p in files)
        if not self.samples:
            raise RecordError(
                f"ember: ImageFolderDataset: no images ({', '.join(extensions)}) in the class folders of "
                f"{self.root}; lay them out as root/<class>/<image>"
            )

    @classmethod
    def new_classification(cls, root: str | os.PathLike, **kwargs) -> ImageFolderDataset:
        """Burn's constructor name."""
        return cls(root, **kwargs)

    def __len__(self) -> int:
        return len(self.samples)

    def get(self, index: int) -> ImageItem | None:
        position = check_index(index)
        if position is None or not 0 <= position < len(self.samples):
            return None
        path, label = self.samples[position]
        image_module = _pillow()
        try:
            with image_module.open(path) as image:
                if self.mode is not None:
                    image = image.convert(self.mode)
                if self.size is not None:
                    image = image.resize((self.size[1], self.size[0]))
                array = np.asarray(image)
        except OSError as error:
            raise RecordError(f"ember: ImageFolderDataset: cannot read the image {path}: {error}") from None
        if array.ndim == 2:
            array = array[:, :, None]
        return ImageItem(array, label, path)
