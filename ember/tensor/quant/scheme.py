"""``QuantScheme``: how a tensor is quantized (Burn's ``QuantScheme``).

A scheme names the stored integer type (``int8`` or ``int4``), whether the mapping is
symmetric (``q = round(x / s)``) or asymmetric with a zero point
(``q = round(x / s) + z``), the level at which scales are shared (one per tensor, one
per channel, i.e. per row of the quantized matrix, or one per block of ``n``
consecutive values along the last axis), and what happens to activations:
``None`` (weight-only: the kernel dequantizes the weight in registers),
``"dynamic"`` (per-token int8 scales computed at run time: an int8 x int8 GEMM, or for
int4 weights the nibbles times int8 values) or
``"static"`` (int8 with one scale per layer fixed by a calibration pass).

>>> QuantScheme.int8()
QuantScheme(int8, symmetric, channel)
>>> QuantScheme.int4(block=32).group_size(4096)
32
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ember.errors import ConfigError, ShapeError

__all__ = ["QuantScheme"]

_VALUES = ("int8", "int4")
_LEVELS = ("tensor", "channel", "block")
_ACTIVATIONS = (None, "dynamic", "static")


@dataclass(frozen=True)
class QuantScheme:
    """A quantization scheme; build it with :meth:`int8` or :meth:`int4`."""

    value: str = "int8"
    symmetric: bool = True
    level: str = "channel"
    block: int | None = None
    activations: str | None = None

    def __post_init__(self) -> None:
        if self.value not in _VALUES:
            raise ConfigError(f"ember: QuantScheme: value must be one of {_VALUES}, got {self.value!r}")
        if self.level not in _LEVELS:
            raise ConfigError(f"ember: QuantScheme: level must be one of {_LEVELS}, got {self.level!r}")
        if self.level == "block":
            if not isinstance(self.block, int) or isinstance(self.block, bool) or self.block < 2:
                raise ConfigError(f"ember: QuantScheme: block size must be an int >= 2, got {self.block!r}")
            if self.value == "int4" and self.block % 2:
                raise ConfigError(
                    f"ember: QuantScheme: an int4 block packs two values per byte, so its size must be even, "
                    f"got {self.block}"
                )
        elif self.block is not None:
            raise ConfigError(f"ember: QuantScheme: block={self.block} needs level='block', got level={self.level!r}")
        if self.activations not in _ACTIVATIONS:
            raise ConfigError(
                f"ember: QuantScheme: activations must be None, 'dynamic' or 'static', got {self.activations!r}"
            )
        if self.activations is not None and (not self.symmetric or (self.value == "int8" and self.level == "block")):
            raise ConfigError(
                f"ember: QuantScheme: {self.activations} activation quantization multiplies int8 activations by "
                f"symmetric weights: int8 per channel or per tensor, or int4; got {self!r}"
            )

    @staticmethod
    def int8(
        level: str = "channel", *, symmetric: bool = True, block: int | None = None, activations: str | None = None
    ) -> QuantScheme:
        """int8 weights (per channel by default); ``activations="dynamic"`` also
        quantizes each input row to int8 at run time."""
        if block is not None and level == "channel":
            level = "block"
        return QuantScheme("int8", symmetric, level, block, activations)

    @staticmethod
    def int4(
        block: int | None = 32, *, symmetric: bool = True, level: str | None = None, activations: str | None = None
    ) -> QuantScheme:
        """int4 weights, two per byte, one scale per ``block`` values (32 by default);
        ``block=None`` with ``level="channel"`` or ``"tensor"`` shares scales wider.
        ``activations="dynamic"`` also rounds each input row to int8 at run time (flex's
        decode then multiplies the nibbles by the int8 values in integers)."""
        if level is None:
            level = "block" if block is not None else "channel"
        return QuantScheme("int4", symmetric, level, block if level == "block" else None, activations)

    @property
    def bits(self) -> int:
        return 8 if self.value == "int8" else 4

    @property
    def qmin(self) -> int:
        """The smallest quantized value (symmetric schemes drop ``-2**(bits-1)`` so the
        range is symmetric; asymmetric ones store unsigned values)."""
        if self.symmetric:
            return -(2 ** (self.bits - 1) - 1) if self.value == "int8" else -8
        return 0

    @property
    def qmax(self) -> int:
        return 2 ** (self.bits - 1) - 1 if self.symmetric else 2**self.bits - 1

    def group_size(self, cols: int) -> int:
        """How many consecutive values along the last axis share one scale, for rows
        of ``cols`` values (``cols`` for per-tensor and per-channel levels)."""
        if self.level != "block":
            return cols
        assert self.block is not None
        if cols % self.block:
            raise ShapeError(
                f"ember: quantize: block size {self.block} does not divide the last dimension ({cols}); "
                f"choose a block that divides {cols} (e.g. {_divisor_hint(cols, self.block)}) or level='channel'"
            )
        return self.block

    def to_json(self) -> str:
        """The scheme as the JSON text saved in a record's metadata."""
        return json.dumps(
            {
                "value": self.value,
                "symmetric": self.symmetric,
                "level": self.level,
                "block": self.block,
                "activations": self.activations,
            },
            sort_keys=True,
        )

    @staticmethod
    def from_json(text: str) -> QuantScheme:
        try:
            data = json.loads(text)
            return QuantScheme(
                str(data["value"]),
                bool(data["symmetric"]),
                str(data["level"]),
                None if data["block"] is None else int(data["block"]),
                data["activations"],
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"ember: QuantScheme.from_json: not a saved scheme: {text[:80]!r} ({exc})") from None

    def __repr__(self) -> str:
        level = f"block({self.block})" if self.level == "block" else self.level
        parts = [self.value, "symmetric" if self.symmetric else "asymmetric", level]
        if self.activations:
            parts.append(f"activations={self.activations}")
        return f"QuantScheme({', '.join(parts)})"


def _divisor_hint(cols: int, block: int) -> int:
    for b in range(block, 1, -1):
        if cols % b == 0 and b % 2 == 0:
            return b
    return cols
