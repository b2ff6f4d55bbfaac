"""``PositionalEncoding``: fixed sinusoids added to a sequence (Vaswani et al., 2017)."""

from __future__ import annotations

import math

import numpy as np

from ember.device import Device
from ember.errors import ConfigError, ShapeError
from ember.module import Config, Module, RunningState
from ember.tensor import Tensor


def generate_sinusoids(length: int, d_model: int, max_timescale: int, device: Device | None = None) -> Tensor:
    """``[length, d_model]``: ``sin(pos / max_timescale^(k / d_model))`` at even ``k``
    and the matching ``cos`` at ``k + 1``."""
    if d_model % 2:
        raise ConfigError(f"ember: generate_sinusoids: d_model must be even, got {d_model}")
    positions = np.arange(length, dtype=np.float64)[:, None]
    rates = np.exp(np.arange(0, d_model, 2, dtype=np.float64) * (-math.log(max_timescale) / d_model))
    angles = positions * rates
    table = np.empty((length, d_model), dtype=np.float32)
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles)
    return Tensor.from_data(table, device=device)


class PositionalEncodingConfig(Config):
    """Configuration of :class:`PositionalEncoding` (Burn's fields and defaults).

    >>> PositionalEncodingConfig(8).init()(Tensor.zeros([2, 5, 8])).dims()
    [2, 5, 8]
    """

    d_model: int
    max_sequence_size: int = 5000
    max_timescale: int = 10000

    def validate(self) -> None:
        if self.d_model <= 0 or self.d_model % 2:
            raise ConfigError(f"ember: PositionalEncodingConfig: d_model must be even and > 0, got {self.d_model}")
        if self.max_sequence_size <= 0:
            raise ConfigError(
                f"ember: PositionalEncodingConfig: max_sequence_size must be > 0, got {self.max_sequence_size}"
            )
        if self.max_timescale < self.max_sequence_size:
            raise ConfigError(
                f"ember: PositionalEncodingConfig: max_timescale ({self.max_timescale}) must be >= "
                f"max_sequence_size ({self.max_sequence_size})"
            )

    def init(self, device: Device | None = None) -> PositionalEncoding:
        table = generate_sinusoids(self.max_sequence_size, self.d_model, self.max_timescale, device)
        return PositionalEncoding(sinusoids=RunningState(table.unsqueeze_dim(0)), max_timescale=self.max_timescale)


class PositionalEncoding(Module):
    """Adds the first ``seq`` rows of the sinusoid table to ``[batch, seq, d_model]``.
    The table is a :class:`RunningState` (saved, moved with the module, never trained)."""

    sinusoids: RunningState
    max_timescale: int = 10000

    def forward(self, x: Tensor) -> Tensor:
        _, max_size, d_model = self.sinusoids.shape
        if x.rank != 3 or x.dims()[2] != d_model:
            raise ShapeError(
                f"ember: PositionalEncoding: the input must be [batch, seq, d_model={d_model}], got {x.dims()}"
            )
        seq = x.dims()[1]
        if seq > max_size:
            raise ShapeError(
                f"ember: PositionalEncoding: the sequence length {seq} exceeds max_sequence_size={max_size}; "
                "build the layer with a larger max_sequence_size"
            )
        table = self.sinusoids.value()
        if table.device is not x.device:
            table = table.to_device(x.device)
        return x.add(table.slice([None, (0, seq)]))

    def extra_repr(self) -> str:
        _, max_size, d_model = self.sinusoids.shape
        return f"d_model: {d_model}, max_sequence_size: {max_size}, max_timescale: {self.max_timescale}"
