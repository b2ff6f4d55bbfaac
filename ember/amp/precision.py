"""Training precisions by name (as PyTorch Lightning spells them)."""

from __future__ import annotations

from dataclasses import dataclass

from ember.backend.dtype import DType
from ember.errors import ConfigError


@dataclass(frozen=True)
class Precision:
    """``"32-true"`` (float32 throughout), ``"bf16-mixed"`` (autocast to bfloat16) or
    ``"16-mixed"`` (autocast to float16 with a :class:`~ember.amp.GradScaler`).
    Parameters and optimizer states stay float32 in every mode."""

    name: str
    autocast_dtype: DType | None
    loss_scaling: bool

    @staticmethod
    def parse(value: str | Precision) -> Precision:
        if isinstance(value, Precision):
            return value
        key = str(value).strip().lower()
        found = _PRECISIONS.get(key)
        if found is None:
            raise ConfigError(f"ember: precision must be one of '32-true', 'bf16-mixed', '16-mixed', got {value!r}")
        return found

    @property
    def is_mixed(self) -> bool:
        return self.autocast_dtype is not None


FULL = Precision("32-true", None, False)
BF16_MIXED = Precision("bf16-mixed", DType.BFLOAT16, False)
FP16_MIXED = Precision("16-mixed", DType.FLOAT16, True)
_PRECISIONS = {"32-true": FULL, "32": FULL, "bf16-mixed": BF16_MIXED, "16-mixed": FP16_MIXED}
