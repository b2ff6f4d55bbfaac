"""Colour transforms: ``Normalize`` (CHW float) and ``ColorJitter`` (HWC, uint8 or float in [0, 1])."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.data.vision.transforms.base import Transform, check_hw, to_dtype
from ember.errors import ConfigError


class Normalize(Transform):
    """``(image - mean[c]) / std[c]`` per channel of a CHW float image (after
    :class:`ToCHW`), torchvision's ``Normalize``; the result is float32 (float64 kept)."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]):
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        if len(self.mean) != len(self.std) or any(s == 0 for s in self.std):
            raise ConfigError(f"ember: Normalize: mean and std need one value per channel, std non-zero: {mean}, {std}")

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if image.ndim != 3 or (len(self.mean) != 1 and image.shape[0] != len(self.mean)):
            raise ConfigError(
                f"ember: Normalize: expected a CHW image with {len(self.mean)} channels (use ToCHW first), "
                f"got shape {image.shape}"
            )
        dtype = np.float64 if image.dtype == np.float64 else np.float32
        mean: np.ndarray = np.asarray(self.mean, dtype)[:, None, None]
        std: np.ndarray = np.asarray(self.std, dtype)[:, None, None]
        x: np.ndarray = image.astype(dtype)
        return (x - mean) / std


def grayscale(image: np.ndarray) -> np.ndarray:
    """ITU-R 601 luma (torchvision's weights) as HW1 float; one-channel images as they are."""
    if image.ndim == 2 or image.shape[2] == 1:
        return image.reshape(image.shape[0], image.shape[1], 1).astype(np.float32)
    rgb = image[..., :3].astype(np.float32)
    return (0.2989 * rgb[..., 0] + 0.587 * rgb[..., 1] + 0.114 * rgb[..., 2])[..., None]


def blend(image: np.ndarray, other: Any, factor: float) -> np.ndarray:
    """``factor * image + (1 - factor) * other`` clipped to the image's range, in its dtype."""
    bound = 255.0 if image.dtype == np.uint8 else 1.0
    x = image.astype(np.float32)
    other = np.asarray(other, np.float32)
    if image.ndim == 2 and other.ndim == 3:
        other = other[..., 0]
    return to_dtype(np.clip(factor * x + (1.0 - factor) * other, 0.0, bound), image.dtype)


def adjust_brightness(image: np.ndarray, factor: float) -> np.ndarray:
    return blend(image, 0.0, factor)


def adjust_contrast(image: np.ndarray, factor: float) -> np.ndarray:
    return blend(image, grayscale(image).mean(), factor)


def adjust_saturation(image: np.ndarray, factor: float) -> np.ndarray:
    if image.ndim == 2 or image.shape[2] == 1:
        return image
    return blend(image, grayscale(image), factor)


def adjust_hue(image: np.ndarray, shift: float) -> np.ndarray:
    """Rotates the hue by ``shift`` turns (in ``[-0.5, 0.5]``) through HSV."""
    if image.ndim == 2 or image.shape[2] == 1:
        return image
    bound = 255.0 if image.dtype == np.uint8 else 1.0
    rgb = image[..., :3].astype(np.float32) / bound
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    maxc, minc = rgb.max(-1), rgb.min(-1)
    delta = maxc - minc
    safe = np.where(delta == 0, 1.0, delta)
    h = np.where(maxc == r, (g - b) / safe % 6.0, np.where(maxc == g, (b - r) / safe + 2.0, (r - g) / safe + 4.0))
    h = np.where(delta == 0, 0.0, h) / 6.0
    h = (h + shift) % 1.0
    s = np.where(maxc == 0, 0.0, delta / np.where(maxc == 0, 1.0, maxc))
    v = maxc
    i = np.floor(h * 6.0)
    f = h * 6.0 - i
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    i = i.astype(np.int64) % 6
    choices = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)]
    out = np.stack([np.choose(i, [c[k] for c in choices]) for k in range(3)], axis=-1) * bound
    if image.shape[2] > 3:
        out = np.concatenate([out, image[..., 3:].astype(np.float32)], axis=-1)
    return to_dtype(out, image.dtype)


def _range(name: str, value: Any, center: float, bound: tuple[float, float] | None) -> tuple[float, float] | None:
    if isinstance(value, (int, float)):
        if value < 0:
            raise ConfigError(f"ember: ColorJitter: {name} must be >= 0, got {value}")
        lo, hi = center - float(value), center + float(value)
        if bound is not None:
            lo = max(lo, bound[0])
    elif isinstance(value, Sequence) and len(value) == 2:
        lo, hi = float(value[0]), float(value[1])
    else:
        raise ConfigError(f"ember: ColorJitter: {name} must be a number or a (min, max) pair, got {value!r}")
    if lo > hi:
        raise ConfigError(f"ember: ColorJitter: {name} range ({lo}, {hi}) is empty")
    return None if lo == hi == center else (lo, hi)


class ColorJitter(Transform):
    """Random brightness, contrast, saturation and hue in a random order (torchvision's
    ``ColorJitter``): a number ``b`` draws a factor in ``[max(0, 1 - b), 1 + b]`` (hue a
    shift in ``[-hue, hue]``, ``hue <= 0.5``), a pair gives the range itself."""

    def __init__(self, brightness: Any = 0, contrast: Any = 0, saturation: Any = 0, hue: Any = 0):
        self.brightness = _range("brightness", brightness, 1.0, (0.0, np.inf))
        self.contrast = _range("contrast", contrast, 1.0, (0.0, np.inf))
        self.saturation = _range("saturation", saturation, 1.0, (0.0, np.inf))
        self.hue = _range("hue", hue, 0.0, None)
        if self.hue is not None and not -0.5 <= self.hue[0] <= self.hue[1] <= 0.5:
            raise ConfigError(f"ember: ColorJitter: hue must lie in [-0.5, 0.5], got {hue!r}")

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        check_hw("ColorJitter", image)
        ops = [
            (self.brightness, adjust_brightness),
            (self.contrast, adjust_contrast),
            (self.saturation, adjust_saturation),
            (self.hue, adjust_hue),
        ]
        for k in rng.permutation(4):
            bounds, fn = ops[k]
            if bounds is not None:
                image = fn(image, float(rng.uniform(bounds[0], bounds[1])))
        return image
