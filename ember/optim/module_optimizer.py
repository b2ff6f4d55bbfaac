"""``ModuleOptimizer``: applies a per-tensor optimizer to every parameter of a module
(Burn's ``OptimizerAdaptor``), keeping each parameter's state under its ``ParamId``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ember.errors import ConfigError
from ember.module import Module, ModuleMapper, Param, ParamGroup, ParamId
from ember.optim.base import OptimizerConfig, SimpleOptimizer
from ember.optim.clipping import GradientClipping
from ember.optim.grads import GradientsParams


@dataclass
class _Group:
    group: ParamGroup
    optimizer: SimpleOptimizer
    clipping: GradientClipping | None
    lr: float | None
    lr_scale: float


class _StepMapper(ModuleMapper):
    def __init__(self, owner: ModuleOptimizer, lr: float, grads: GradientsParams):
        self.owner = owner
        self.lr = lr
        self.grads = grads

    def map_float(self, param: Param, path: str) -> Param:
        grad = self.grads.remove(param.id)
        if grad is None:
            return param
        owner = self.owner
        optimizer, clipping, lr = owner._settings(param.id, path, self.lr)
        if clipping is not None:
            grad = clipping.clip(grad)
        value = param.val()
        device = value.device
        inner = device.inner()
        if device is not inner:
            value = value.to_device(inner)
        if grad.device is not inner:
            grad = grad.to_device(inner)
        if grad.dims() != value.dims():
            raise ConfigError(
                f"ember: optimizer step: the gradient of {path!r} has shape {grad.dims()}, "
                f"but the parameter has {value.dims()}"
            )
        new_value, owner.states[param.id] = optimizer.step(lr, value, grad, owner.states.get(param.id))
        if device is not inner:
            new_value = new_value.to_device(device)
        return Param.from_mapped_value(param.id, new_value, param.require_grad)


class ModuleOptimizer:
    """Steps a whole module: ``model = optim.step(lr, model, grads)``.

    Parameters without a gradient are returned unchanged; every updated parameter
    keeps its id, so the next step finds its state again. Groups
    (:meth:`with_group`) give a subset of parameters another optimizer, clipping
    or learning rate; the last matching group wins.
    """

    def __init__(self, optimizer: SimpleOptimizer, grad_clipping: GradientClipping | None = None):
        self.optimizer = optimizer
        self.grad_clipping = grad_clipping
        self.groups: list[_Group] = []
        self.states: dict[ParamId, Any] = {}
        self._lookup: dict[tuple[ParamId, str], _Group | None] = {}

    def with_group(
        self,
        group: ParamGroup,
        optimizer: OptimizerConfig | SimpleOptimizer | None = None,
        clipping: GradientClipping | None = None,
        *,
        lr: float | None = None,
        lr_scale: float = 1.0,
    ) -> ModuleOptimizer:
        """Parameters in ``group`` use ``optimizer`` (default: the main one), their own
        ``clipping``, a fixed ``lr`` or a multiple ``lr_scale`` of the step's rate."""
        if isinstance(optimizer, OptimizerConfig):
            optimizer = optimizer.build()
        if optimizer is not None and not isinstance(optimizer, SimpleOptimizer):
            raise ConfigError(f"ember: with_group: expected an optimizer config, got {type(optimizer).__name__}")
        self.groups.append(_Group(group, optimizer or self.optimizer, clipping, lr, float(lr_scale)))
        self._lookup.clear()
        return self

    def _settings(self, param_id: ParamId, path: str, lr: float) -> tuple[SimpleOptimizer, Any, float]:
        if not self.groups:
            return self.optimizer, self.grad_clipping, lr
        key = (param_id, path)
        if key not in self._lookup:
            chosen = None
            for group in self.groups:
                if group.group.matches(param_id, path):
                    chosen = group
            self._lookup[key] = chosen
        group = self._lookup[key]
        if group is None:
            return self.optimizer, self.grad_clipping, lr
        group_lr = group.lr if group.lr is not None else lr * group.lr_scale
        return group.optimizer, group.clipping or self.grad_clipping, group_lr

    def step(self, lr: float, module: Module, grads: GradientsParams) -> Module:
        """One optimizer step: a new module with updated parameters (same ids)."""
        if not isinstance(grads, GradientsParams):
            raise ConfigError(
                f"ember: step: grads must be GradientsParams (GradientsParams.from_grads(loss.backward(), model)), "
                f"got {type(grads).__name__}"
            )
        lr = float(lr)
        if not lr == lr or lr < 0:
            raise ConfigError(f"ember: step: the learning rate must be a number >= 0, got {lr}")
        return module.map(_StepMapper(self, lr, grads))

    # ------------------------------------------------------------------ records
    def to_record(self) -> dict[str, Any]:
        """The per-parameter states, keyed by the parameter id's text."""
        return {
            pid.serialize(): {"type": type(state).__name__, "fields": state.to_record()}
            for pid, state in self.states.items()
        }

    def load_record(self, record: dict[str, Any]) -> ModuleOptimizer:
        """Restores states saved by :meth:`to_record` (replacing the current ones)."""
        states: dict[ParamId, Any] = {}
        known = {self.optimizer.state_type.__name__: self.optimizer.state_type}
        for group in self.groups:
            known[group.optimizer.state_type.__name__] = group.optimizer.state_type
        for key, entry in record.items():
            state_type = known.get(entry.get("type"))
            if state_type is None:
                raise ConfigError(
                    f"ember: load_record: a state of type {entry.get('type')!r} does not match this optimizer "
                    f"({', '.join(known)})"
                )
            states[ParamId.parse(key)] = state_type.from_record(entry["fields"])
        self.states = states
        return self

    def __repr__(self) -> str:
        return f"ModuleOptimizer({type(self.optimizer).__name__}, {len(self.states)} states, {len(self.groups)} groups)"
