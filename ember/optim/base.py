"""The per-tensor optimizer protocol (Burn's ``SimpleOptimizer``) and its config base."""

from __future__ import annotations

import dataclasses
from typing import Any

from ember.device import Device
from ember.errors import ConfigError, RecordError
from ember.module import Config
from ember.tensor import Tensor


@dataclasses.dataclass
class OptimizerState:
    """Base class of per-parameter states: a dataclass of tensors and numbers."""

    def to_device(self, device: Device) -> OptimizerState:
        values = {
            f.name: (v.to_device(device) if isinstance(v, Tensor) else v)
            for f in dataclasses.fields(self)
            for v in [getattr(self, f.name)]
        }
        return type(self)(**values)

    def to_record(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> OptimizerState:
        fields = {f.name: str(f.type) for f in dataclasses.fields(cls)}
        if set(record) != set(fields):
            raise ConfigError(f"ember: {cls.__name__}: the saved state has fields {sorted(record)}, expected {sorted(fields)}")
        for name, hint in fields.items():
            value = record[name]
            if "Tensor" in hint:
                valid = isinstance(value, Tensor) or (value is None and "None" in hint)
            elif hint == "int":
                valid = type(value) is int
            elif hint == "float":
                valid = isinstance(value, (int, float)) and not isinstance(value, bool)
            else:
                valid = True
            if not valid:
                raise RecordError(
                    f"ember: {cls.__name__}: the saved field {name!r} is a {type(value).__name__}, expected {hint}; "
                    "the optimizer record is corrupt"
                )
        return cls(**record)


class SimpleOptimizer:
    """One optimizer step on one tensor: ``step(lr, tensor, grad, state)`` returns
    ``(new_tensor, new_state)``; ``state`` is ``None`` on the first step.
    Tensors live on the inner (non-autodiff) device."""

    state_type: type[OptimizerState] = OptimizerState

    def step(self, lr: float, tensor: Tensor, grad: Tensor, state: Any) -> tuple[Tensor, Any]:
        raise NotImplementedError

    def step_many(
        self, lr: float, tensors: list[Tensor], grads: list[Tensor], states: list[Any]
    ) -> list[tuple[Tensor, Any]]:
        """:meth:`step` on several tensors with one learning rate. Optimizers with a
        fused multi-tensor kernel override this; the result is the same."""
        return [self.step(lr, t, g, s) for t, g, s in zip(tensors, grads, states)]


class OptimizerConfig(Config):
    """Base of optimizer configs: ``init()`` returns a ``ModuleOptimizer``."""

    def build(self) -> SimpleOptimizer:
        """The per-tensor optimizer."""
        raise NotImplementedError

    def init(self) -> Any:
        from ember.optim.module_optimizer import ModuleOptimizer

        return ModuleOptimizer(self.build(), grad_clipping=getattr(self, "grad_clipping", None))


def check_range(name: str, field: str, value: float, low: float, high: float, *, low_open: bool = False,
                high_open: bool = False) -> None:
    """Raise a ConfigError unless ``low <= value <= high`` (ends optionally open)."""
    below = value <= low if low_open else value < low
    above = value >= high if high_open else value > high
    if below or above or value != value:
        lo = "(" if low_open else "["
        hi = ")" if high_open else "]"
        raise ConfigError(f"ember: {name}: {field} must lie in {lo}{low}, {high}{hi}, got {value}")
