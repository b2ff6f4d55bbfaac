"""The optimizer base: an optimizer is its config, a frozen dataclass of
hyper-parameters whose :meth:`~OptimizerConfig.apply_single` updates one tensor
(MLX's ``apply_single``, Burn's ``SimpleOptimizer::step``), and whose ``init()``
gives the :class:`~ember.optim.ModuleOptimizer` that applies it to a whole module.

A per-tensor state is a small record (:class:`OptimizerState`) of tensors on the
parameter's inner device and numbers, ``None`` before the first step. Tensors (not
bare backend values) because a state must say where it lives: records save and load
it, and ``ember.compile`` follows it as graph inputs and outputs.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar

from ember.device import Device
from ember.errors import ConfigError, RecordError
from ember.module import Config
from ember.optim.clipping import GradientClipping
from ember.tensor import Tensor

if TYPE_CHECKING:
    from ember.optim.module_optimizer import ModuleOptimizer


@dataclasses.dataclass(slots=True)
class OptimizerState:
    """Base of per-tensor states: a dataclass of tensors (on the parameter's inner
    device; ``None`` where unused) and numbers."""

    def to_device(self, device: Device) -> Any:
        """The same record with its tensors on ``device``."""
        return type(self)(
            **{k: v.to_device(device) if isinstance(v, Tensor) else v for k, v in self.to_record().items()}
        )

    def to_record(self) -> dict[str, Any]:
        """The fields by name."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Any:
        """A state from :meth:`to_record`'s fields, each checked against its annotation."""
        fields = {f.name: str(f.type) for f in dataclasses.fields(cls)}
        if not isinstance(record, dict) or set(record) != set(fields):
            got = sorted(record) if isinstance(record, dict) else type(record).__name__
            raise ConfigError(f"ember: {cls.__name__}: the saved state has fields {got}, expected {sorted(fields)}")
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


class OptimizerConfig(Config):
    """Base of optimizers (see the module docstring). ``grad_clipping`` clips each
    gradient before the update (:class:`GradientClipping`)."""

    grad_clipping: GradientClipping | None = None
    #: The state record of this optimizer.
    state_type: ClassVar[type[OptimizerState]] = OptimizerState

    def init(self) -> ModuleOptimizer:
        """The module optimizer: ``model = optim.step(lr, model, grads)``."""
        from ember.optim.module_optimizer import ModuleOptimizer

        return ModuleOptimizer(self, grad_clipping=self.grad_clipping)

    def apply_single(self, lr: float, param: Tensor, grad: Tensor, state: Any) -> tuple[Tensor, Any]:
        """The new value of ``param`` and its new state (``state`` is ``None`` on the
        first step)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement apply_single")

    def step(self, lr: float, param: Tensor, grad: Tensor, state: Any = None) -> tuple[Tensor, Any]:
        """One step on one tensor of an inner (non-autodiff) device: ``(new_param, state)``
        (pass the state back on the next step)."""
        return self.step_many(lr, [param], [grad], [state])[0]

    def step_many(
        self, lr: float, params: list[Tensor], grads: list[Tensor], states: list[Any]
    ) -> list[tuple[Tensor, Any]]:
        """:meth:`step` on several tensors with one learning rate. Optimizers with a fused
        kernel override it (Adam); the others run :meth:`apply_single` on each."""
        return [self.apply_single(lr, param, grad, state) for param, grad, state in zip(params, grads, states)]


def check_range(
    name: str, field: str, value: float, low: float, high: float, *, low_open: bool = False, high_open: bool = False
) -> None:
    """Raise a ConfigError unless ``low <= value <= high`` (ends optionally open)."""
    below = value <= low if low_open else value < low
    above = value >= high if high_open else value > high
    if below or above or value != value:
        lo = "(" if low_open else "["
        hi = ")" if high_open else "]"
        raise ConfigError(f"ember: {name}: {field} must lie in {lo}{low}, {high}{hi}, got {value}")


def check_betas(config: Config, *fields: str) -> None:
    """Each named field lies in ``[0, 1)``."""
    for field in fields:
        check_range(type(config).__name__, field, getattr(config, field), 0.0, 1.0, high_open=True)
