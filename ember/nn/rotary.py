"""``RotaryEncoding`` (RoFormer, Su et al., 2021): positions as rotations of feature pairs."""

from __future__ import annotations

import numpy as np

from ember.device import Device
from ember.errors import ConfigError, DTypeError, ShapeError
from ember.module import Config, Module, RunningState
from ember.nn.host import cheap_values
from ember.nn.rope_scaling import RopeScaling, base_frequencies, inverse_frequencies
from ember.tensor import Tensor
from ember.tensor.layer_ops import embedding


class RotaryEncodingConfig(Config):
    """Configuration of :class:`RotaryEncoding` (Burn's fields): pair ``i`` of a
    position ``p`` turns by the angle ``p * theta^(-2i / d_model)``. ``interleaved``
    pairs ``(x[2i], x[2i+1])`` (RoFormer's and Burn's layout); ``False`` pairs
    ``(x[i], x[i + d_model/2])`` (Hugging Face's ``rotate_half``: Llama, GPT-NeoX).
    ``scaling`` stretches the frequencies for longer contexts (:class:`RopeScaling`).

    >>> RotaryEncodingConfig(16, 8).init()(Tensor.ones([2, 4, 8])).dims()
    [2, 4, 8]
    """

    max_sequence_length: int
    d_model: int
    theta: float = 10000.0
    interleaved: bool = True
    scaling: RopeScaling | None = None

    def validate(self) -> None:
        if self.d_model <= 0 or self.d_model % 2:
            raise ConfigError(f"ember: RotaryEncodingConfig: d_model must be even and > 0, got {self.d_model}")
        if self.max_sequence_length <= 0:
            raise ConfigError(
                f"ember: RotaryEncodingConfig: max_sequence_length must be > 0, got {self.max_sequence_length}"
            )
        if self.theta <= 0:
            raise ConfigError(f"ember: RotaryEncodingConfig: theta must be > 0, got {self.theta}")
        if self.scaling is not None and self.scaling.rope_type == "dynamic" and self.d_model <= 2:
            raise ConfigError(f"ember: RotaryEncodingConfig: dynamic scaling needs d_model > 2, got {self.d_model}")

    def init(self, device: Device | None = None) -> RotaryEncoding:
        rates, attention_factor = inverse_frequencies(self.d_model, self.theta, self.scaling, self.max_sequence_length)
        angles = np.arange(self.max_sequence_length, dtype=np.float64)[:, None] * rates
        table = (np.stack([np.cos(angles), np.sin(angles)], axis=-1) * attention_factor).astype(np.float32)
        dynamic = None
        if self.scaling is not None and self.scaling.rope_type == "dynamic":
            assert self.scaling.factor is not None  # validated
            original = self.scaling.original_max_position_embeddings or self.max_sequence_length
            dynamic = (float(self.scaling.factor), int(original), float(self.theta))
        return RotaryEncoding(
            freq_complex=RunningState(Tensor.from_data(table, device=device)),
            interleaved=self.interleaved,
            dynamic=dynamic,
        )


class RotaryEncoding(Module):
    """Rotates the feature pairs of ``[..., seq, d_model]`` by their position's angles
    (pairs ``(x[2i], x[2i+1])`` when ``interleaved``, else ``(x[i], x[i + d_model/2])``).
    ``freq_complex`` holds ``[max_sequence_length, d_model / 2, (cos, sin)]`` (times the
    scaling's attention factor); ``dynamic`` is ``(factor, original length, theta)`` of
    dynamic NTK scaling, whose angles are computed per call."""

    freq_complex: RunningState
    interleaved: bool = True
    dynamic: tuple[float, int, float] | None = None

    def forward(self, x: Tensor) -> Tensor:
        return self.apply(x, 0)

    def apply(self, x: Tensor, start: int = 0) -> Tensor:
        """Encode ``x`` as the positions ``start, start + 1, ...`` (for decoding with a cache)."""
        max_length = self.freq_complex.shape[0]
        dims = self._check(x)
        seq = dims[-2]
        if self.dynamic is not None:
            return self.apply_positions(x, Tensor.arange(start, start + seq, device=x.device))
        if start < 0 or start + seq > max_length:
            raise ShapeError(
                f"ember: RotaryEncoding: positions {start}..{start + seq} exceed max_sequence_length={max_length}"
            )
        table = self._table(x).slice([(start, start + seq)])
        return self._rotate(x, table.narrow(-1, 0, 1).squeeze_dim(-1), table.narrow(-1, 1, 1).squeeze_dim(-1))

    def apply_positions(self, x: Tensor, positions: Tensor) -> Tensor:
        """Encode ``x`` ``[..., T, d_model]`` at the int ``positions``: ``[T]`` (every
        row alike) or ``[B, T]`` (per batch row; ``x`` ``[B, ..., T, d_model]``, e.g.
        ``[B, heads, T, head_dim]``). The angles are gathered by a tensor op, so a
        compiled decode step traces once for every position. Positions outside
        ``[0, max_sequence_length)`` raise on an eager flex device; elsewhere their
        rows are unspecified."""
        max_length, half, _ = self.freq_complex.shape
        dims = self._check(x)
        if not isinstance(positions, Tensor) or positions.is_float() or positions.dtype.is_bool:
            raise DTypeError(
                f"ember: RotaryEncoding.apply_positions: positions must be an int Tensor, got {positions!r:.80}"
            )
        pdims = positions.dims()
        if positions.rank not in (1, 2) or pdims[-1] != dims[-2] or (positions.rank == 2 and x.rank < 3):
            raise ShapeError(
                f"ember: RotaryEncoding.apply_positions: positions must be [T={dims[-2]}] or [batch, {dims[-2]}] "
                f"(with x [batch, ..., T, d_model]), got positions {pdims} for x {dims}"
            )
        if positions.rank == 2 and pdims[0] not in (1, dims[0]) and dims[0] != 1:
            raise ShapeError(
                f"ember: RotaryEncoding.apply_positions: positions {pdims} and x {dims} differ in the batch size"
            )
        if positions.device is not x.device:
            positions = positions.to_device(x.device)
        if self.dynamic is not None:
            cos, sin = self._dynamic_angles(positions, half)
        else:
            values = cheap_values(positions)
            if values is not None and values.size and (values.min() < 0 or values.max() >= max_length):
                raise ShapeError(
                    f"ember: RotaryEncoding.apply_positions: positions {values.min()}..{values.max()} lie outside "
                    f"[0, max_sequence_length={max_length})"
                )
            # A gather of table rows (embedding: a compiled plan runs it as a loop).
            table = self._table(x).reshape([max_length, 2 * half])
            rows = embedding(table, positions.reshape([-1]).int()).reshape([-1, half, 2])
            cos = rows.narrow(-1, 0, 1).reshape(pdims + [half])
            sin = rows.narrow(-1, 1, 1).reshape(pdims + [half])
        if positions.rank == 2:  # [B, T, half] -> [B, 1, ..., T, half]
            middle = [1] * (x.rank - 3)
            cos, sin = (
                cos.reshape([pdims[0]] + middle + pdims[1:] + [half]),
                sin.reshape([pdims[0]] + middle + pdims[1:] + [half]),
            )
        return self._rotate(x, cos, sin)

    def _check(self, x: Tensor) -> list[int]:
        half = self.freq_complex.shape[1]
        dims = x.dims()
        if x.rank < 2 or dims[-1] != 2 * half:
            raise ShapeError(
                f"ember: RotaryEncoding: the input must be [..., seq, d_model={2 * half}], got shape {dims}"
            )
        return dims

    def _table(self, x: Tensor) -> Tensor:
        table = self.freq_complex.value()
        return table.to_device(x.device) if table.device is not x.device else table

    def _dynamic_angles(self, positions: Tensor, half: int) -> tuple[Tensor, Tensor]:
        """cos and sin ``[*positions, half]`` of dynamic NTK scaling at the length
        ``max(positions) + 1`` (Hugging Face's ``_compute_dynamic_ntk_parameters``)."""
        assert self.dynamic is not None
        factor, original, theta = self.dynamic
        d = 2 * half
        device = positions.device
        pos = positions.float()
        length = pos.max().add_scalar(1.0)
        stretch = length.mul_scalar(factor / original).sub_scalar(factor - 1.0).clamp_min(1.0)
        exponents = Tensor.from_data((np.arange(half) * 2.0 / (d - 2)).astype(np.float32), device=device)
        base = Tensor.from_data(base_frequencies(d, theta).astype(np.float32), device=device)
        rates = base.mul(stretch.log().mul(exponents).neg().exp())
        angles = pos.unsqueeze_dim(-1).mul(rates)
        return angles.cos(), angles.sin()

    def _rotate(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """``x`` ``[..., T, d]`` rotated by ``cos``/``sin`` ``[..., T, d / 2]``."""
        x = x.float()
        if cos.dtype != x.dtype:
            cos, sin = cos.cast(x.dtype), sin.cast(x.dtype)
        dims = x.dims()
        half = dims[-1] // 2
        # Each pair (x1, x2) becomes (x1 cos - x2 sin, x2 cos + x1 sin): x cos plus x with
        # the pair's halves swapped (a flip) times (-sin, sin). Elementwise ops over
        # views only (no cat), so a compiled plan fuses it into one kernel; the same
        # bits as the two halves computed apart (a + (-b) is a - b).
        if self.interleaved:  # pairs are neighbours: [..., half, 2]
            pairs, axis = x.reshape(dims[:-1] + [half, 2]), -1
            cos, sin = cos.unsqueeze_dim(-1), sin.unsqueeze_dim(-1)
            signs = [[-1.0, 1.0]]
        else:  # pairs are the two halves: [..., 2, half]
            pairs, axis = x.reshape(dims[:-1] + [2, half]), -2
            cos, sin = cos.unsqueeze_dim(-2), sin.unsqueeze_dim(-2)
            signs = [[-1.0], [1.0]]
        sign = Tensor.from_data(np.array(signs, dtype=x.dtype.np), device=x.device)
        rotated = pairs.mul(cos).add(pairs.flip([axis]).mul(sin.mul(sign)))
        return rotated.reshape(dims)

    def extra_repr(self) -> str:
        max_length, half, _ = self.freq_complex.shape
        layout = "" if self.interleaved else ", interleaved: False"
        return f"d_model: {2 * half}, max_sequence_length: {max_length}{layout}"
