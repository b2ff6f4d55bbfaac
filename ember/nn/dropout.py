"""``Dropout``: zeroes random elements while training."""

from __future__ import annotations

from typing import Any

from ember.errors import ConfigError
from ember.module import Config, Module
from ember.tensor import Tensor
from ember.tensor.layer_ops import dropout


class DropoutConfig(Config):
    """Configuration of :class:`Dropout`: each element is zeroed with probability ``prob``.

    >>> DropoutConfig(0.1).init()
    Dropout {prob: 0.1}
    """

    prob: float

    def validate(self) -> None:
        if not 0.0 <= self.prob <= 1.0:
            raise ConfigError(f"ember: DropoutConfig: prob must lie in [0, 1], got {self.prob}")

    def init(self, device: Any = None) -> Dropout:
        """The layer (it has no parameters, so ``device`` is ignored)."""
        return Dropout(self.prob)


class Dropout(Module):
    """Zeroes each element with probability ``prob`` and scales the rest by
    ``1 / (1 - prob)``, drawing with the device's generator (``device.seed(n)`` makes
    it reproducible). It acts only on an autodiff device (training); elsewhere, as
    after ``model.valid()``, it is the identity."""

    prob: float = 0.5

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.prob, training=x.device.is_autodiff())
