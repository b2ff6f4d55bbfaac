"""``RotaryEncoding`` (RoFormer, Su et al., 2021): positions as rotations of feature pairs."""

from __future__ import annotations

import numpy as np

from ember.device import Device
from ember.errors import ConfigError, ShapeError
from ember.module import Config, Module, RunningState
from ember.tensor import Tensor


class RotaryEncodingConfig(Config):
    """Configuration of :class:`RotaryEncoding` (Burn's fields): pair ``i`` of a
    position ``p`` turns by the angle ``p * theta^(-2i / d_model)``.

    >>> RotaryEncodingConfig(16, 8).init()(Tensor.ones([2, 4, 8])).dims()
    [2, 4, 8]
    """

    max_sequence_length: int
    d_model: int
    theta: float = 10000.0

    def validate(self) -> None:
        if self.d_model <= 0 or self.d_model % 2:
            raise ConfigError(f"ember: RotaryEncodingConfig: d_model must be even and > 0, got {self.d_model}")
        if self.max_sequence_length <= 0:
            raise ConfigError(
                f"ember: RotaryEncodingConfig: max_sequence_length must be > 0, got {self.max_sequence_length}"
            )
        if self.theta <= 0:
            raise ConfigError(f"ember: RotaryEncodingConfig: theta must be > 0, got {self.theta}")

    def init(self, device: Device | None = None) -> RotaryEncoding:
        rates = 1.0 / self.theta ** (np.arange(0, self.d_model, 2, dtype=np.float64) / self.d_model)
        angles = np.arange(self.max_sequence_length, dtype=np.float64)[:, None] * rates
        table = np.stack([np.cos(angles), np.sin(angles)], axis=-1).astype(np.float32)
        return RotaryEncoding(freq_complex=RunningState(Tensor.from_data(table, device=device)))


class RotaryEncoding(Module):
    """Rotates the feature pairs ``(x[2i], x[2i+1])`` of ``[..., seq, d_model]`` by
    their position's angles. ``freq_complex`` holds ``[max_sequence_length, d_model / 2,
    (cos, sin)]``."""

    freq_complex: RunningState

    def forward(self, x: Tensor) -> Tensor:
        return self.apply(x, 0)

    def apply(self, x: Tensor, start: int = 0) -> Tensor:
        """Encode ``x`` as the positions ``start, start + 1, ...`` (for decoding with a cache)."""
        max_length, half, _ = self.freq_complex.shape
        dims = x.dims()
        if x.rank < 2 or dims[-1] != 2 * half:
            raise ShapeError(
                f"ember: RotaryEncoding: the input must be [..., seq, d_model={2 * half}], got shape {dims}"
            )
        seq = dims[-2]
        if start < 0 or start + seq > max_length:
            raise ShapeError(
                f"ember: RotaryEncoding: positions {start}..{start + seq} exceed max_sequence_length={max_length}"
            )
        table = self.freq_complex.value()
        if table.device is not x.device:
            table = table.to_device(x.device)
        table = table.slice([(start, start + seq)])
        cos, sin = table.narrow(-1, 0, 1), table.narrow(-1, 1, 1)
        pairs = x.float().reshape(dims[:-1] + [half, 2])
        even, odd = pairs.narrow(-1, 0, 1), pairs.narrow(-1, 1, 1)
        rotated = Tensor.cat([even.mul(cos).sub(odd.mul(sin)), even.mul(sin).add(odd.mul(cos))], -1)
        return rotated.reshape(dims)

    def extra_repr(self) -> str:
        max_length, half, _ = self.freq_complex.shape
        return f"d_model: {2 * half}, max_sequence_length: {max_length}"
