"""``RandAugment``-lite: ``num_ops`` ops drawn from a short list, at one magnitude."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ember.data.vision.transforms.base import Transform, check_hw
from ember.data.vision.transforms.color import adjust_brightness, adjust_contrast
from ember.errors import ConfigError

OPS = ("Identity", "Brightness", "Contrast", "Rotate90", "HorizontalFlip", "TranslateX", "TranslateY")


def translate(image: np.ndarray, dy: int, dx: int, fill: float = 0) -> np.ndarray:
    """``image`` moved by ``(dy, dx)`` pixels, the uncovered border set to ``fill``."""
    out = np.full_like(image, fill)
    h, w = image.shape[:2]
    if abs(dy) >= h or abs(dx) >= w:
        return out
    src = image[max(-dy, 0) : h - max(dy, 0), max(-dx, 0) : w - max(dx, 0)]
    out[max(dy, 0) : h - max(-dy, 0), max(dx, 0) : w - max(-dx, 0)] = src
    return out


class RandAugment(Transform):
    """torchvision's ``RandAugment`` with fewer ops: ``num_ops`` ops drawn uniformly (with
    repeats) from ``ops`` (default all of :data:`OPS`), each at ``magnitude`` of
    ``num_magnitude_bins`` and a random sign: brightness and contrast factors
    ``1 ± 0.9 * m``, translations up to ``150/331`` of the side (torchvision's), a
    rotation by 90, 180 or 270 degrees (square images only; others are left), a flip."""

    def __init__(
        self,
        num_ops: int = 2,
        magnitude: int = 9,
        num_magnitude_bins: int = 31,
        fill: float = 0,
        ops: Sequence[str] | None = None,
    ):
        if num_ops < 0 or not 0 <= magnitude < num_magnitude_bins:
            raise ConfigError(
                f"ember: RandAugment: need num_ops >= 0 and 0 <= magnitude < num_magnitude_bins, "
                f"got {num_ops}, {magnitude}, {num_magnitude_bins}"
            )
        self.num_ops = int(num_ops)
        self.magnitude = int(magnitude)
        self.num_magnitude_bins = int(num_magnitude_bins)
        self.fill = fill
        self.ops = tuple(OPS if ops is None else ops)
        unknown = [op for op in self.ops if op not in OPS]
        if unknown or not self.ops:
            raise ConfigError(f"ember: RandAugment: ops must be a non-empty list from {OPS}, got {ops!r}")

    def _level(self, top: float) -> float:
        bins = self.num_magnitude_bins
        return top * self.magnitude / (bins - 1) if bins > 1 else 0.0

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        check_hw("RandAugment", image)
        for _ in range(self.num_ops):
            op = self.ops[int(rng.integers(len(self.ops)))]
            sign = 1.0 if rng.random() < 0.5 else -1.0
            h, w = image.shape[:2]
            if op == "Brightness":
                image = adjust_brightness(image, 1.0 + sign * self._level(0.9))
            elif op == "Contrast":
                image = adjust_contrast(image, 1.0 + sign * self._level(0.9))
            elif op == "Rotate90":
                k = int(rng.integers(1, 4))
                if h == w or k == 2:
                    image = np.rot90(image, k, axes=(0, 1))
            elif op == "HorizontalFlip":
                image = image[:, ::-1]
            elif op == "TranslateX":
                image = translate(image, 0, int(sign * self._level(150.0 / 331.0 * w)), self.fill)
            elif op == "TranslateY":
                image = translate(image, int(sign * self._level(150.0 / 331.0 * h)), 0, self.fill)
        return image
