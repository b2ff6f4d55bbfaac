"""The transform protocol, image conversion and ``Compose``.

Images are numpy arrays ``[height, width, channels]`` (or ``[height, width]``), uint8
in ``[0, 255]`` or float (colour ops assume ``[0, 1]``); PIL images are converted to
uint8 HWC on entry. :class:`ToCHW` ends a pipeline with float32 ``[channels, height,
width]`` (torchvision's ``ToTensor``), which :class:`Normalize` expects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember.errors import ConfigError


def as_array(image: Any) -> np.ndarray:
    """``image`` as a numpy array: PIL images become uint8 HWC (RGB, L kept as HW)."""
    if isinstance(image, np.ndarray):
        return image
    if hasattr(image, "getbands") and hasattr(image, "mode"):  # a PIL image
        if image.mode not in ("L", "RGB", "RGBA", "F", "I", "I;16"):
            image = image.convert("RGB")
        return np.asarray(image)
    return np.asarray(image)


def check_hw(op: str, image: np.ndarray) -> None:
    if image.ndim not in (2, 3):
        raise ConfigError(
            f"ember: {op}: expected an image [height, width] or [height, width, channels], got shape {image.shape}"
        )


def to_dtype(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Float results back to ``dtype``: integer images rounded and clipped to their range."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return np.clip(np.rint(values), info.min, info.max).astype(dtype)
    return values.astype(dtype, copy=False)


def pair(op: str, name: str, value: Any) -> tuple[int, int]:
    """An int or an ``(h, w)`` pair as ``(h, w)``."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        out = (int(value), int(value))
    elif isinstance(value, Sequence) and len(value) in (1, 2):
        out = (int(value[0]), int(value[-1]))
    else:
        raise ConfigError(f"ember: {op}: {name} must be an int or a (height, width) pair, got {value!r}")
    if min(out) < 1:
        raise ConfigError(f"ember: {op}: {name} must be positive, got {value!r}")
    return out


def default_rng(rng: np.random.Generator | None) -> np.random.Generator:
    return rng if rng is not None else np.random.default_rng()


class Transform:
    """``transform(image, rng=None)``: the transformed image. Random transforms draw from
    ``rng`` (a fresh unseeded generator when omitted; a ``TransformDataset`` passes the
    item's). Subclasses implement ``apply(image, rng)`` on a numpy array."""

    def __call__(self, image: Any, rng: np.random.Generator | None = None) -> Any:
        return self.apply(as_array(image), default_rng(rng))

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> Any:
        raise NotImplementedError

    def apply_many(self, images: Sequence[Any], rngs: Sequence[np.random.Generator]) -> list[Any]:
        """``[transform(image, rng) for image, rng in zip(images, rngs)]``: what a
        :class:`~ember.data.TransformDataset` calls for a loader's batch, each image with
        its item's generator. A transform may override it with one pass over the batch
        that draws from each generator what ``apply`` draws (:class:`RandomCrop` does)."""
        return [self(image, rng) for image, rng in zip(images, rngs)]

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


def call(transform: Callable[..., Any], image: Any, rng: np.random.Generator) -> Any:
    """``transform(image, rng)`` for a :class:`Transform`, ``transform(image)`` for a plain function."""
    if isinstance(transform, Transform):
        return transform(image, rng)
    return transform(image)


class Compose(Transform):
    """The transforms in turn, all drawing from the same generator (torchvision's
    ``Compose``); plain functions ``f(image)`` may be mixed in.

    >>> import numpy as np
    >>> from ember.data.vision.transforms import CenterCrop
    >>> Compose([CenterCrop(2), ToCHW()])(np.zeros((4, 4, 3), np.uint8)).shape
    (3, 2, 2)
    """

    def __init__(self, transforms: Sequence[Callable[..., Any]]):
        self.transforms = list(transforms)
        for t in self.transforms:
            if not callable(t):
                raise ConfigError(f"ember: Compose: every transform must be callable, got {type(t).__name__}")

    def __call__(self, image: Any, rng: np.random.Generator | None = None) -> Any:
        rng = default_rng(rng)
        for t in self.transforms:
            image = call(t, image, rng)
        return image

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> Any:
        return self(image, rng)

    def apply_many(self, images: Sequence[Any], rngs: Sequence[np.random.Generator]) -> list[Any]:
        """Each transform over the whole batch in turn: every item's generator sees
        the draws it sees in ``__call__``, in the same order."""
        out = list(images)
        for t in self.transforms:
            out = t.apply_many(out, rngs) if isinstance(t, Transform) else [t(image) for image in out]
        return out


class ToCHW(Transform):
    """HWC (or HW) to float32 CHW; uint8 is scaled to ``[0, 1]`` (torchvision's ``ToTensor``)."""

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        check_hw("ToCHW", image)
        scale = 1.0 / 255.0 if image.dtype == np.uint8 else 1.0
        out = image.astype(np.float32) * np.float32(scale)
        return out[None] if out.ndim == 2 else np.ascontiguousarray(out.transpose(2, 0, 1))


def center_crop_box(height: int, width: int, th: int, tw: int) -> tuple[int, int]:
    """torchvision's centre: ``round((size - crop) / 2)``."""
    return round((height - th) / 2.0), round((width - tw) / 2.0)
