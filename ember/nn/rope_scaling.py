"""``RopeScaling``: the context-extension variants of rotary encoding (linear, Llama 3,
YaRN, dynamic NTK), with the inverse frequencies and attention factor of Hugging Face's
``transformers.modeling_rope_utils``."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from ember.errors import ConfigError
from ember.module import Config

RopeType = Literal["linear", "llama3", "yarn", "dynamic"]


class RopeScaling(Config):
    """How rotary encoding stretches its positions (Hugging Face's ``rope_parameters``):

    - ``"linear"``: every frequency divided by ``factor``;
    - ``"llama3"``: low frequencies divided by ``factor``, high ones kept, a smooth ramp
      between (``low_freq_factor``, ``high_freq_factor``, ``original_max_position_embeddings``);
    - ``"yarn"``: YaRN's ramp between interpolated and extrapolated frequencies
      (``beta_fast``, ``beta_slow``, ``truncate``) and the attention factor (``mscale``):
      ``attention_factor`` if given, else from ``mscale``/``mscale_all_dim``, else
      ``0.1 ln(factor) + 1``; ``factor=None`` means ``max_sequence_length /
      original_max_position_embeddings``;
    - ``"dynamic"``: NTK-aware scaling from the run-time length ``max(positions) + 1``
      beyond ``original_max_position_embeddings`` (Hugging Face's
      ``max_position_embeddings``; defaults to ``max_sequence_length``).

    >>> RopeScaling("linear", factor=2.0).rope_type
    'linear'
    """

    rope_type: RopeType
    factor: float | None = None
    low_freq_factor: float | None = None
    high_freq_factor: float | None = None
    original_max_position_embeddings: int | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True

    def validate(self) -> None:
        name = f"ember: RopeScaling({self.rope_type!r})"
        if self.factor is None and self.rope_type != "yarn":
            raise ConfigError(f"{name}: needs factor (> 0)")
        if self.factor is not None and self.factor <= 0:
            raise ConfigError(f"{name}: factor must be > 0, got {self.factor}")
        if self.rope_type == "llama3":
            missing = [
                field
                for field in ("low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
                if getattr(self, field) is None
            ]
            if missing:
                raise ConfigError(f"{name}: needs {', '.join(missing)}")
            if self.low_freq_factor == self.high_freq_factor:
                raise ConfigError(
                    f"{name}: low_freq_factor and high_freq_factor must differ, both {self.low_freq_factor}"
                )
        if self.rope_type == "yarn" and self.original_max_position_embeddings is None:
            raise ConfigError(f"{name}: needs original_max_position_embeddings")
        if self.original_max_position_embeddings is not None and self.original_max_position_embeddings <= 0:
            raise ConfigError(
                f"{name}: original_max_position_embeddings must be > 0, got {self.original_max_position_embeddings}"
            )


def base_frequencies(d_model: int, theta: float) -> np.ndarray:
    """``theta^(-2i / d_model)`` for ``i < d_model / 2`` (float64)."""
    return 1.0 / theta ** (np.arange(0, d_model, 2, dtype=np.float64) / d_model)


def inverse_frequencies(
    d_model: int, theta: float, scaling: RopeScaling | None, max_sequence_length: int
) -> tuple[np.ndarray, float]:
    """``(inverse frequencies [d_model / 2] in float64, attention factor)`` as
    ``transformers.modeling_rope_utils`` computes them (``dynamic``: at lengths up to
    ``original_max_position_embeddings``, where it leaves them unscaled)."""
    inv = base_frequencies(d_model, theta)
    if scaling is None or scaling.rope_type == "dynamic":
        return inv, 1.0
    factor = scaling.factor
    if scaling.rope_type == "linear":
        assert factor is not None
        return inv / factor, 1.0
    if scaling.rope_type == "llama3":
        return _llama3(inv, scaling), 1.0
    return _yarn(d_model, theta, scaling, max_sequence_length)


def _llama3(inv: np.ndarray, s: RopeScaling) -> np.ndarray:
    factor, low, high, old = s.factor, s.low_freq_factor, s.high_freq_factor, s.original_max_position_embeddings
    assert factor is not None and low is not None and high is not None and old is not None
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return np.where(medium, smoothed, scaled)


def _yarn(d_model: int, theta: float, s: RopeScaling, max_sequence_length: int) -> tuple[np.ndarray, float]:
    original = s.original_max_position_embeddings
    assert original is not None
    factor = s.factor if s.factor is not None else max_sequence_length / original

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = s.attention_factor
    if attention is None:
        attention = (
            mscale(factor, s.mscale) / mscale(factor, s.mscale_all_dim)
            if s.mscale and s.mscale_all_dim
            else mscale(factor)
        )

    def correction_dim(rotations: float) -> float:
        return (d_model * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(s.beta_fast), correction_dim(s.beta_slow)
    if s.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d_model - 1)
    if low == high:
        high += 0.001  # as Hugging Face: no division by zero
    ramp = np.clip((np.arange(d_model // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    extrapolation = 1.0 - ramp
    pos_freqs = theta ** (np.arange(0, d_model, 2, dtype=np.float64) / d_model)
    inv = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    return inv, float(attention)
