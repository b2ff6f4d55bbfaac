"""``Upsample``: resizing as a layer (``torch.nn.Upsample``; Burn's ``Interpolate2d``)."""

from __future__ import annotations

from typing import Any

from ember.errors import ConfigError
from ember.module import Config, Module
from ember.tensor import Tensor
from ember.tensor.interpolate import interpolate

_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear", "area")


class UpsampleConfig(Config):
    """Configuration of :class:`Upsample`: an output ``size`` or a ``scale_factor``, the
    ``mode`` and ``align_corners`` of :func:`ember.tensor.interpolate.interpolate`.

    >>> UpsampleConfig(scale_factor=2.0).init()(Tensor.ones([1, 1, 2, 3])).dims()
    [1, 1, 4, 6]
    """

    size: int | tuple[int, ...] | None = None
    scale_factor: float | tuple[float, ...] | None = None
    mode: str = "nearest"
    align_corners: bool | None = None

    def validate(self) -> None:
        if (self.size is None) == (self.scale_factor is None):
            raise ConfigError("ember: UpsampleConfig: give exactly one of size and scale_factor")
        if self.mode not in _MODES:
            raise ConfigError(f"ember: UpsampleConfig: mode must be one of {', '.join(_MODES)}, got {self.mode!r}")

    def init(self, device: Any = None) -> Upsample:
        """The layer (it has no parameters, so ``device`` is ignored)."""
        return Upsample(self.size, self.scale_factor, self.mode, self.align_corners)


class Upsample(Module):
    """Resizes ``[batch, channels, *spatial]`` inputs to ``size`` or by ``scale_factor``."""

    size: Any = None
    scale_factor: Any = None
    mode: str = "nearest"
    align_corners: bool | None = None

    def forward(self, x: Tensor) -> Tensor:
        return interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners)
