"""Geometric transforms on HWC (or HW) arrays: crops, flips and resizing."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.data.vision.transforms.base import Transform, as_array, center_crop_box, check_hw, pair, to_dtype
from ember.errors import ConfigError

_PAD_MODES = {"constant": "constant", "edge": "edge", "reflect": "reflect", "symmetric": "symmetric"}


def _constant_fill(mode: str, fill: Any) -> bool:
    """Whether ``pad`` writes a constant border of a number (its fast path)."""
    return mode == "constant" and isinstance(fill, (int, float, np.number)) and not isinstance(fill, bool)


def pad(image: np.ndarray, left: int, top: int, right: int, bottom: int, fill: Any = 0, mode: str = "constant"):
    """``image`` padded by the given widths (torchvision's ``padding_mode`` names)."""
    widths = [(top, bottom), (left, right)] + [(0, 0)] * (image.ndim - 2)
    if _constant_fill(mode, fill):
        # np.pad's result, written directly: np.pad costs ~15 us on an 8x8 digit, which
        # was a third of reading one augmented item (examples/classify_digits.py).
        h, w = image.shape[:2]
        out = np.empty((top + h + bottom, left + w + right) + image.shape[2:], image.dtype)
        out[...] = np.array(fill).astype(image.dtype)  # the fill cast as np.pad casts it
        out[top : top + h, left : left + w] = image
        return out
    if mode == "constant":
        return np.pad(image, widths, mode="constant", constant_values=fill)
    return np.pad(image, widths, mode=mode)  # type: ignore[call-overload]


def padding4(op: str, padding: Any) -> tuple[int, int, int, int]:
    """torchvision's padding: an int, ``(left/right, top/bottom)`` or ``(left, top, right, bottom)``."""
    if isinstance(padding, (int, np.integer)) and not isinstance(padding, bool):
        p = int(padding)
        out = (p, p, p, p)
    elif isinstance(padding, Sequence) and len(padding) == 2:
        out = (int(padding[0]), int(padding[1]), int(padding[0]), int(padding[1]))
    elif isinstance(padding, Sequence) and len(padding) == 4:
        out = tuple(int(p) for p in padding)  # type: ignore[assignment]
    else:
        raise ConfigError(f"ember: {op}: padding must be an int, a pair or four ints, got {padding!r}")
    if min(out) < 0:
        raise ConfigError(f"ember: {op}: padding must be >= 0, got {padding!r}")
    return out


def check_mode(op: str, mode: str) -> str:
    if mode not in _PAD_MODES:
        raise ConfigError(f"ember: {op}: padding_mode must be one of {sorted(_PAD_MODES)}, got {mode!r}")
    return mode


def crop(image: np.ndarray, top: int, left: int, height: int, width: int) -> np.ndarray:
    return image[top : top + height, left : left + width]


class CenterCrop(Transform):
    """The central ``size`` (an int for a square, or ``(h, w)``); an image smaller than
    ``size`` is padded with zeros first (torchvision's ``CenterCrop``)."""

    def __init__(self, size: Any):
        self.size = pair("CenterCrop", "size", size)

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        check_hw("CenterCrop", image)
        th, tw = self.size
        h, w = image.shape[:2]
        if th > h or tw > w:
            ph, pw = max(th - h, 0), max(tw - w, 0)
            image = pad(image, pw // 2, ph // 2, (pw + 1) // 2, (ph + 1) // 2)
            h, w = image.shape[:2]
        top, left = center_crop_box(h, w, th, tw)
        return crop(image, top, left, th, tw)


class RandomCrop(Transform):
    """A ``size`` window at a uniformly drawn position, after ``padding`` (int, ``(lr, tb)``
    or ``(l, t, r, b)``) with ``fill`` or ``padding_mode`` (constant, edge, reflect,
    symmetric); ``pad_if_needed`` pads an image smaller than ``size`` (torchvision's)."""

    def __init__(
        self,
        size: Any,
        padding: Any = None,
        pad_if_needed: bool = False,
        fill: Any = 0,
        padding_mode: str = "constant",
    ):
        self.size = pair("RandomCrop", "size", size)
        self.padding = None if padding is None else padding4("RandomCrop", padding)
        self.pad_if_needed = bool(pad_if_needed)
        self.fill = fill
        self.padding_mode = check_mode("RandomCrop", padding_mode)

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        check_hw("RandomCrop", image)
        if self.padding is not None:
            image = pad(image, *self.padding, fill=self.fill, mode=self.padding_mode)
        th, tw = self.size
        h, w = image.shape[:2]
        if self.pad_if_needed and (h < th or w < tw):
            dh, dw = max(th - h, 0), max(tw - w, 0)
            image = pad(image, dw, dh, dw, dh, fill=self.fill, mode=self.padding_mode)
            h, w = image.shape[:2]
        if h < th or w < tw:
            raise ConfigError(
                f"ember: RandomCrop: the crop {th}x{tw} is larger than the (padded) image {h}x{w}; "
                "pass pad_if_needed=True or more padding"
            )
        top = int(rng.integers(0, h - th + 1))
        left = int(rng.integers(0, w - tw + 1))
        return crop(image, top, left, th, tw)

    def apply_many(self, images: Sequence[Any], rngs: Sequence[np.random.Generator]) -> list[Any]:
        """The crops of a batch of images of one shape and dtype with a constant fill:
        one array of crops filled once, each window's part inside its image copied in
        (no padded copy; each item's draws are ``apply``'s). Other batches crop item by
        item."""
        arrays = [as_array(image) for image in images]
        if len(arrays) < 2 or not _constant_fill(self.padding_mode, self.fill):
            return super().apply_many(arrays, rngs)
        first = arrays[0]
        if first.ndim not in (2, 3) or any(a.shape != first.shape or a.dtype != first.dtype for a in arrays):
            return super().apply_many(arrays, rngs)
        left, top, right, bottom = self.padding or (0, 0, 0, 0)
        th, tw = self.size
        ih, iw = first.shape[:2]
        h, w = ih + top + bottom, iw + left + right
        if self.pad_if_needed and (h < th or w < tw):  # apply's second padding, merged (one constant border)
            dh, dw = max(th - h, 0), max(tw - w, 0)
            left, top, h, w = left + dw, top + dh, h + 2 * dh, w + 2 * dw
        if h < th or w < tw:
            return super().apply_many(arrays, rngs)  # apply raises the error
        out = np.empty((len(arrays), th, tw) + first.shape[2:], first.dtype)  # never aliases the dataset's arrays
        out[...] = np.array(self.fill).astype(first.dtype)  # the fill cast as pad casts it
        for k, (image, rng) in enumerate(zip(arrays, rngs)):
            y = int(rng.integers(0, h - th + 1)) - top  # the window's corner in the image's coordinates
            x = int(rng.integers(0, w - tw + 1)) - left
            y0, y1, x0, x1 = max(y, 0), min(y + th, ih), max(x, 0), min(x + tw, iw)
            if y0 < y1 and x0 < x1:
                out[k, y0 - y : y1 - y, x0 - x : x1 - x] = image[y0:y1, x0:x1]
        return list(out)


class RandomHorizontalFlip(Transform):
    """Mirrors left-right with probability ``p``."""

    def __init__(self, p: float = 0.5):
        self.p = float(p)

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        check_hw("RandomHorizontalFlip", image)
        return image[:, ::-1] if rng.random() < self.p else image


class RandomVerticalFlip(Transform):
    """Mirrors top-bottom with probability ``p``."""

    def __init__(self, p: float = 0.5):
        self.p = float(p)

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        check_hw("RandomVerticalFlip", image)
        return image[::-1] if rng.random() < self.p else image


_INTERPOLATIONS = ("bilinear", "nearest")


def resize_weights(n_in: int, n_out: int, interpolation: str, antialias: bool) -> np.ndarray:
    """The ``[n_out, n_in]`` matrix that resamples one axis: half-pixel centres; bilinear
    is a triangle filter widened by the scale when shrinking with ``antialias`` (PIL's
    and torchvision's ``antialias=True``), nearest picks ``floor(i * n_in / n_out)``."""
    scale = n_in / n_out
    weights = np.zeros((n_out, n_in), np.float64)
    if interpolation == "nearest":
        src = np.minimum(np.floor(np.arange(n_out) * scale).astype(np.int64), n_in - 1)
        weights[np.arange(n_out), src] = 1.0
        return weights
    support = scale if (antialias and scale > 1.0) else 1.0
    centers = (np.arange(n_out) + 0.5) * scale
    js = np.arange(n_in) + 0.5
    # support 1 is plain bilinear; the renormalisation at the borders clamps the source
    w = np.maximum(0.0, 1.0 - np.abs(js[None, :] - centers[:, None]) / support)
    return w / w.sum(axis=1, keepdims=True)


def resize(image: np.ndarray, size: tuple[int, int], interpolation: str = "bilinear", antialias: bool = True):
    """``image`` (HWC or HW) resampled to ``size = (h, w)``; uint8 results are rounded."""
    h, w = image.shape[:2]
    if (h, w) == tuple(size):
        return image
    wh = resize_weights(h, size[0], interpolation, antialias)
    ww = resize_weights(w, size[1], interpolation, antialias)
    work = np.float32 if image.dtype in (np.uint8, np.float32, np.float16) else np.float64
    x: np.ndarray = image.astype(work)
    out = np.einsum("oh,hw...->ow...", wh.astype(work), x)
    out = np.einsum("pw,ow...->op...", ww.astype(work), out)
    return to_dtype(out, image.dtype)


def output_size(h: int, w: int, size: Any, max_size: int | None) -> tuple[int, int]:
    """torchvision's ``Resize`` size rule: an int matches the shorter edge."""
    if isinstance(size, Sequence) and len(size) == 2:
        return int(size[0]), int(size[1])
    s = int(size[0]) if isinstance(size, Sequence) else int(size)
    short, long = (h, w) if h <= w else (w, h)
    new_short, new_long = s, int(s * long / short)
    if max_size is not None and new_long > max_size:
        new_short, new_long = int(max_size * new_short / new_long), max_size
    return (new_short, new_long) if h <= w else (new_long, new_short)


def check_interpolation(op: str, interpolation: str) -> str:
    if interpolation not in _INTERPOLATIONS:
        raise ConfigError(f"ember: {op}: interpolation must be one of {_INTERPOLATIONS}, got {interpolation!r}")
    return interpolation


class Resize(Transform):
    """Resamples to ``size``: ``(h, w)``, or an int that the shorter edge becomes (the
    aspect ratio kept, the longer edge at most ``max_size``), torchvision's rule.
    ``interpolation`` is ``"bilinear"`` (antialiased when shrinking, as PIL) or ``"nearest"``."""

    def __init__(self, size: Any, interpolation: str = "bilinear", max_size: int | None = None, antialias: bool = True):
        pair("Resize", "size", size)
        self.size = size
        self.interpolation = check_interpolation("Resize", interpolation)
        self.max_size = max_size
        self.antialias = bool(antialias)

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        check_hw("Resize", image)
        h, w = image.shape[:2]
        return resize(image, output_size(h, w, self.size, self.max_size), self.interpolation, self.antialias)


class RandomResizedCrop(Transform):
    """A crop of random area (a fraction in ``scale`` of the image) and aspect ratio (in
    ``ratio``, drawn log-uniformly), resized to ``size`` (torchvision's draw: ten tries,
    then the central crop with the ratio clamped)."""

    def __init__(
        self,
        size: Any,
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
        interpolation: str = "bilinear",
        antialias: bool = True,
    ):
        self.size = pair("RandomResizedCrop", "size", size)
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            raise ConfigError(f"ember: RandomResizedCrop: scale and ratio must be (min, max), got {scale}, {ratio}")
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))
        self.interpolation = check_interpolation("RandomResizedCrop", interpolation)
        self.antialias = bool(antialias)

    def params(self, height: int, width: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
        """``(top, left, h, w)`` of the crop."""
        area = height * width
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        for _ in range(10):
            target_area = area * rng.uniform(self.scale[0], self.scale[1])
            aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
            w = round(math.sqrt(target_area * aspect))
            h = round(math.sqrt(target_area / aspect))
            if 0 < w <= width and 0 < h <= height:
                return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
        in_ratio = width / height
        if in_ratio < self.ratio[0]:
            w, h = width, round(width / self.ratio[0])
        elif in_ratio > self.ratio[1]:
            h, w = height, round(height * self.ratio[1])
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        check_hw("RandomResizedCrop", image)
        top, left, h, w = self.params(image.shape[0], image.shape[1], rng)
        return resize(crop(image, top, left, h, w), self.size, self.interpolation, self.antialias)
