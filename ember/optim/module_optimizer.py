"""``ModuleOptimizer``: applies a per-tensor optimizer to every parameter of a module
(Burn's ``OptimizerAdaptor``), keeping each parameter's state under its ``ParamId``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ember.device import Device
from ember.errors import ConfigError, RecordError
from ember.module import Module, ModuleMapper, Param, ParamGroup, ParamId
from ember.module.key_mismatch import listing
from ember.optim.base import OptimizerConfig, OptimizerState
from ember.optim.clipping import GradientClipping
from ember.optim.grads import GradientsParams
from ember.tensor import Tensor
from ember.tensor.capture_hook import StateDict, is_symbolic
from ember.tensor.ops.complex import view_as_complex, view_as_real


@dataclass
class _Group:
    group: ParamGroup
    optimizer: OptimizerConfig
    clipping: GradientClipping | None
    lr: float | None
    lr_scale: float


class _Replace(ModuleMapper):
    """Puts updated parameters (by id) into the module."""

    def __init__(self, updates: dict[ParamId, Param]):
        self.updates = updates

    def map_float(self, param: Param, path: str) -> Param:
        return self.updates.get(param.id, param)


class ModuleOptimizer:
    """Steps a whole module: ``model = optim.step(lr, model, grads)``.

    Parameters without a gradient are returned unchanged; every updated parameter
    keeps its id, so the next step finds its state again. Groups
    (:meth:`with_group`) give a subset of parameters another optimizer, clipping
    or learning rate; the last matching group wins.
    """

    def __init__(self, optimizer: OptimizerConfig, grad_clipping: GradientClipping | None = None):
        if not isinstance(optimizer, OptimizerConfig):
            raise ConfigError(f"ember: ModuleOptimizer: expected an optimizer config, got {type(optimizer).__name__}")
        self.optimizer = optimizer
        self.grad_clipping = grad_clipping
        self.groups: list[_Group] = []
        #: Each parameter's state, by id; followed by ember.compile: a captured step
        #: reads and updates these states.
        self.states: StateDict = StateDict()
        self._lookup: dict[tuple[ParamId, str], int | None] = {}
        #: The path of each stepped (or loaded) parameter in its model, by id: saved with
        #: the states so that a mismatch can name the parameters on both sides.
        self._paths: dict[ParamId, str] = {}
        # (loaded ids, where from): checked against the model of the next step (strict loads)
        self._unchecked: tuple[frozenset[ParamId], str] | None = None
        self._strict = True

    def with_group(
        self,
        group: ParamGroup,
        optimizer: OptimizerConfig | None = None,
        clipping: GradientClipping | None = None,
        *,
        lr: float | None = None,
        lr_scale: float = 1.0,
    ) -> ModuleOptimizer:
        """Parameters in ``group`` use ``optimizer`` (default: the main one), their own
        ``clipping``, a fixed ``lr`` or a multiple ``lr_scale`` of the step's rate.

        The group's optimizer config's own ``grad_clipping`` is ignored (as in Burn);
        pass ``clipping`` instead.

        Unlike the configs' ``with_*`` methods (which return changed copies), this adds the
        group to *this* optimizer and returns it, for chaining:
        ``optim = AdamConfig().init().with_group(...).with_group(...)``."""
        if optimizer is not None and not isinstance(optimizer, OptimizerConfig):
            raise ConfigError(f"ember: with_group: expected an optimizer config, got {type(optimizer).__name__}")
        self.groups.append(_Group(group, optimizer or self.optimizer, clipping, lr, float(lr_scale)))
        self._lookup.clear()
        return self

    def _group_of(self, param_id: ParamId, path: str) -> int | None:
        """The index of the last group that matches, or ``None``."""
        key = (param_id, path)
        if key not in self._lookup:
            chosen = None
            for index, group in enumerate(self.groups):
                if group.group.matches(param_id, path):
                    chosen = index
            self._lookup[key] = chosen
        return self._lookup[key]

    def step(self, lr: float, module: Module, grads: GradientsParams) -> Module:
        """One optimizer step: a new module with updated parameters (same ids)."""
        if not isinstance(grads, GradientsParams):
            raise ConfigError(
                f"ember: step: grads must be GradientsParams (GradientsParams.from_grads(loss.backward(), model)), "
                f"got {type(grads).__name__}"
            )
        if not is_symbolic(lr):  # a run-time scalar of ember.compile is checked when it is read
            lr = float(lr)
            if not lr == lr or lr < 0:
                raise ConfigError(f"ember: step: the learning rate must be a number >= 0, got {lr}")
        if self._unchecked is not None:
            self._check_ids(module)
        entries = grads.entries(module)
        paths = self._paths
        buckets = self._buckets(lr, entries)
        updates: dict[ParamId, Param] = {}
        new_states: dict[ParamId, OptimizerState] = {}  # committed once every bucket has stepped
        for optimizer, group_lr, items in buckets:
            if not items:
                continue  # no gradient: nothing to step
            values, grads_inner = [], []
            device = inner = None
            for param, path, grad in items:
                paths[param.id] = path
                value = param.val()
                if value._device is not device:
                    device = value._device
                    inner = device.inner()
                if grad._primitive.shape != value._primitive.shape:
                    raise ConfigError(
                        f"ember: optimizer step: the gradient of {path!r} has shape {grad.dims()}, "
                        f"but the parameter has {value.dims()}"
                    )
                values.append(value.to_device(inner))
                grads_inner.append(grad if grad._device is inner else grad.to_device(inner))
            ids = [param.id for param, _, _ in items]
            complex_at = [i for i, v in enumerate(values) if v._primitive.dtype.kind == "c"]
            for i in complex_at:  # torch's optimizers step complex parameters through view_as_real
                values[i], grads_inner[i] = view_as_real(values[i]), view_as_real(grads_inner[i])
            results = optimizer.step_many(group_lr, values, grads_inner, self.states.get_many(ids))
            if complex_at:
                results = list(results)
            for i in complex_at:  # the state stays in the real view: [..., 2]
                new_value, new_state = results[i]
                results[i] = (view_as_complex(new_value), new_state)
            from_inner = Param.from_inner_value
            for pid, (param, _, _), (new_value, new_state) in zip(ids, items, results):
                new_states[pid] = new_state
                updates[pid] = from_inner(pid, new_value, param._device, param.require_grad)
        self.states.update(new_states)
        return module.map(_Replace(updates))

    def _buckets(
        self, lr: float, entries: list[tuple[Param, str, Tensor]]
    ) -> list[tuple[OptimizerConfig, float, list]]:
        """The entries (gradients clipped) grouped by optimizer and learning rate."""
        if not self.groups and self.grad_clipping is None:  # one bucket: no lookups
            return [(self.optimizer, lr, entries)] if entries else []
        buckets: dict[tuple[int, float], tuple[OptimizerConfig, float, list]] = {}
        # Clipping over all gradients of a group (global norm) needs them all first:
        # entries are clipped per clipping owner (-1: the main optimizer's).
        clipped: dict[int, tuple[GradientClipping, list[int]]] = {}
        items: list[list[Any]] = []
        for param, path, grad in entries:
            index = self._group_of(param.id, path) if self.groups else None
            optimizer, clipping, owner, group_lr = self.optimizer, self.grad_clipping, -1, lr
            if index is not None:
                group = self.groups[index]
                optimizer = group.optimizer
                group_lr = group.lr if group.lr is not None else lr * group.lr_scale
                if group.clipping is not None:
                    clipping, owner = group.clipping, index
            if clipping is not None:
                clipped.setdefault(owner, (clipping, []))[1].append(len(items))
            key = (id(optimizer), group_lr)
            if key not in buckets:
                buckets[key] = (optimizer, group_lr, [])
            item = [param, path, grad]
            items.append(item)
            buckets[key][2].append(item)
        for clipping, indices in clipped.values():
            for i, new_grad in zip(indices, clipping.clip_all([items[i][2] for i in indices])):
                items[i][2] = new_grad
        return list(buckets.values())

    # ------------------------------------------------------------------ records
    def to_record(self) -> dict[str, Any]:
        """The per-parameter states, keyed by the parameter id's text (with the
        parameter's path in its model, where known)."""
        record: dict[str, Any] = {}
        for pid, state in self.states.items():
            entry: dict[str, Any] = {"type": type(state).__name__, "fields": state.to_record()}
            if pid in self._paths:
                entry["path"] = self._paths[pid]
            record[pid.serialize()] = entry
        return record

    def load_record(
        self,
        record: dict[str, Any],
        module: Module | None = None,
        *,
        strict: bool = True,
        source: str = "the optimizer record",
    ) -> ModuleOptimizer:
        """Restores states saved by :meth:`to_record` (replacing the current ones).

        With ``strict=True`` the states must belong to the model they will step: when
        none of their ids is a parameter of ``module``, or a state's tensors have
        another shape than its parameter (checked now if given, else at the next
        :meth:`step`), a RecordError names the parameters' paths and shapes on both
        sides; ``strict=False`` accepts states of other ids (their shapes are still
        checked: a state of another shape cannot step its parameter)."""
        if not isinstance(record, dict):
            raise RecordError(f"ember: load_record: {source} is not a table of optimizer states")
        known = {self.optimizer.state_type.__name__: self.optimizer.state_type}
        for group in self.groups:
            known[group.optimizer.state_type.__name__] = group.optimizer.state_type
        states = StateDict()
        paths: dict[ParamId, str] = {}
        for key, entry in record.items():
            if (
                not isinstance(key, str)
                or len(key) != 16
                or any(c not in "0123456789abcdef" for c in key)
                or not isinstance(entry, dict)
                or not isinstance(entry.get("fields"), dict)
                or not isinstance(entry.get("path", ""), str)
            ):
                raise RecordError(f"ember: load_record: {source} is corrupt: the state {str(key)[:40]!r} is malformed")
            type_name = entry.get("type")
            state_type = known.get(type_name) if isinstance(type_name, str) else None
            if state_type is None:
                raise ConfigError(
                    f"ember: load_record: a state of type {str(entry.get('type'))[:40]!r} does not match this optimizer "
                    f"({', '.join(known)})"
                )
            pid = ParamId.parse(key)
            states[pid] = state_type.from_record(entry["fields"])
            if "path" in entry:
                paths[pid] = entry["path"]
        if module is not None and isinstance(module, Module):
            _check_states(states, paths, module, source, strict)  # before anything changes: never half-loaded
        self.states = states
        self._paths = paths
        self._unchecked = (frozenset(states), source) if states and module is None else None
        self._strict = strict
        return self

    def _check_ids(self, module: Module) -> None:
        """The states of a load without a module, checked against the first model they step."""
        ids, source = self._unchecked or (frozenset(), "")
        self._unchecked = None
        if ids and isinstance(module, Module):
            _check_states(self.states, self._paths, module, source, self._strict)

    def save_file(self, path: Any) -> None:
        """Save the per-parameter states (safetensors, atomically; see ``ember.module.record``)."""
        from ember.module.record import save_record

        save_record(path, {"states": self.to_record()}, metadata={"content": "optimizer"})

    def load_file(
        self, path: Any, device: Any = None, *, module: Module | None = None, strict: bool = True
    ) -> ModuleOptimizer:
        """Restore states saved by :meth:`save_file`, their tensors on ``device`` (the
        model's inner device; default: ``Device.default().inner()``). ``module`` and
        ``strict`` as in :meth:`load_record`: states of another model raise."""
        from ember.module.record import load_record

        device = (device or Device.default()).inner()
        tree = load_record(path, device=device)
        if not isinstance(tree, dict) or "states" not in tree:
            raise ConfigError(f"ember: {path} is not an optimizer record (saved by ModuleOptimizer.save_file)")
        return self.load_record(tree["states"], module, strict=strict, source=str(path))

    def __repr__(self) -> str:
        return f"ModuleOptimizer({type(self.optimizer).__name__}, {len(self.states)} states, {len(self.groups)} groups)"


def _state_shape(state: OptimizerState) -> list[int] | None:
    """The shape of a state's tensors (all have their parameter's shape), or ``None``
    when they disagree among themselves or there is none."""
    shapes = {tuple(v.dims()) for v in state.to_record().values() if isinstance(v, Tensor)}
    return list(shapes.pop()) if len(shapes) == 1 else None


def _check_states(
    states: dict[ParamId, OptimizerState], paths: dict[ParamId, str], module: Module, source: str, strict: bool
) -> None:
    """States meeting the model they will step: (strict) some of their ids must be the
    model's parameters, and every state of a parameter must have its shape. The message
    names the paths and shapes on both sides (the record's and the model's)."""
    if not states:
        return
    name = type(module).__name__
    ours = {param.id: (path, list(param.lazy_shape())) for path, param in module.named_params()}

    def theirs(pid: ParamId, state: OptimizerState) -> str:
        where = paths.get(pid, f"id {pid.serialize()}")
        return f"{where} {_state_shape(state)}"

    wrong = [
        f"{ours[pid][0]}: {ours[pid][1]} in {name}, {_state_shape(state)} in the record"
        for pid, state in states.items()
        if pid in ours and _state_shape(state) not in (None, ours[pid][1])
    ]
    if wrong:
        raise RecordError(
            f"ember: the optimizer states of {source} do not fit {name}: {len(wrong)} of them have another shape than "
            f"their parameter ({listing(wrong, 8)}); they were saved for a model of another configuration. Build the "
            "model with the configuration the states were saved with, or start the optimizer over (a fresh "
            "optimizer, without load_file)"
        )
    if strict and not states.keys() & ours.keys():
        record_side = listing([theirs(pid, state) for pid, state in states.items()], 8)
        model_side = listing([f"{path} {shape}" for path, shape in ours.values()], 8)
        same = sorted((paths.get(pid), _state_shape(s)) for pid, s in states.items()) == sorted(
            (path, shape) for path, shape in ours.values()
        )
        cause = (
            "the paths and shapes agree, so this model was probably built fresh instead of loaded (a model draws "
            "new ParamIds when it is built; load its record with model.load_file(...) first so that the ids match)"
            if same
            else "they were saved with another model, or this model was built fresh instead of loaded (a model "
            "draws new ParamIds when it is built; load its record with model.load_file(...) first so that the ids "
            "match)"
        )
        raise RecordError(
            f"ember: the optimizer states of {source} belong to none of the {len(ours)} parameters of {name} "
            f"({len(states)} states; in the record: {record_side}; in {name}: {model_side}): {cause}. Pass "
            "strict=False to load_file/load_record to accept them anyway (the optimizer then starts over for this "
            "model)"
        )
