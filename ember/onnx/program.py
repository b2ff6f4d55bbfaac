"""``Program``: an imported graph as a list of steps over numbered slots.

Built once at load (:mod:`ember.onnx.plan`); every ``forward`` copies the slot
template, fills the inputs, parameters, running states and device constants, and
runs the steps in order: each step is ``(function, input slots, output slot(s))``.

Values that depend only on shapes (``Shape -> Gather -> Concat -> Reshape`` on a
dynamic batch dim) are *host* values, computed in numpy. Unless the graph has ops
whose output shapes depend on data, they are kept per input shape, so that a later
call with the same shapes runs only the tensor steps.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.backend.dtype import DType
from ember.device import Device
from ember.errors import DTypeError, EmberError, OnnxError, ShapeError
from ember.onnx.trainable import InitializerRole
from ember.tensor import Tensor
from ember.tensor.capture_hook import capturing

DEVICE_SLOT = 0  # the device of this call (for constants made at run time)
NONE_SLOT = 1  # always None: an omitted optional input
HOST_CACHE_SIZE = 16


@dataclass(frozen=True)
class InputSpec:
    """A graph input: its name, slot, dtype and declared dims (``None`` for a dynamic dim)."""

    name: str
    slot: int
    dtype: DType
    dims: tuple[int | None, ...] | None
    dim_names: tuple[Any, ...] | None = None
    sequence: bool = False  # a sequence of tensors: the model takes a list of them
    optional: bool = False  # an optional value: the model takes None for an empty one

    def describe_dims(self) -> str:
        if self.sequence:
            return "a list of tensors"
        names = self.dim_names if self.dim_names is not None else self.dims
        if names is None:
            return "any shape"
        return "[" + ", ".join("?" if d is None else str(d) for d in names) + "]"


@dataclass
class Step:
    """One node: ``fn(*[env[i] for i in ins])`` written to ``outs`` (a tuple when the node
    has several outputs; -1 for an unused one). ``host`` steps compute host values only."""

    fn: Callable[..., Any]
    ins: tuple[int, ...]
    outs: int | tuple[int, ...]
    host: bool
    label: str
    drops: tuple[int, ...] = ()


_RunStep = tuple[Callable[..., Any], tuple[int, ...], Any, bool, tuple[int, ...]]


class Program:
    """The steps and slot tables of one imported graph."""

    def __init__(
        self,
        n_slots: int,
        template: list[Any],
        inputs: list[InputSpec],
        param_slots: list[tuple[int, str]],
        state_slots: list[tuple[int, str]],
        const_tensors: list[tuple[int, np.ndarray, DType]],
        steps: list[Step],
        outputs: list[tuple[str, int]],
        data_dependent: bool,
    ):
        self.n_slots = n_slots
        self.template = template
        self.inputs = inputs
        self.param_slots = param_slots
        self.state_slots = state_slots
        self.const_tensors = const_tensors
        self.steps = steps
        self.outputs = outputs
        self.data_dependent = data_dependent
        self.host_outputs = [s for step in steps if step.host for s in _slots(step.outs)]
        self.cacheable = bool(self.host_outputs) and not data_dependent
        # (fn, ins, outs, multi, drops): ``outs`` is a tuple of slots when ``multi``, else one slot.
        self._all: list[_RunStep] = [(s.fn, s.ins, s.outs, type(s.outs) is tuple, s.drops) for s in steps]
        self._tensor_only: list[_RunStep] = [
            (s.fn, s.ins, s.outs, type(s.outs) is tuple, s.drops) for s in steps if not s.host
        ]
        self._labels = [s.label for s in steps]
        self._tensor_labels = [s.label for s in steps if not s.host]
        # Per input: its slot, the shape it must have when the model fixes every dim, its numpy dtype.
        self._expected = [
            (spec.slot, spec.dims, spec.dims is not None and None not in spec.dims, spec.dtype.np) for spec in inputs
        ]
        self._device_consts: dict[Device, list[tuple[int, Tensor]]] = {}
        self._host_cache: OrderedDict[tuple, list[tuple[int, Any]]] = OrderedDict()

    # ------------------------------------------------------------------ running
    def run(self, args: Sequence[Any], params: dict[str, Any], states: dict[str, Any]) -> list[Any]:
        """The graph's outputs for ``args`` (one tensor per graph input, in order)."""
        env = self.template.copy()
        device: Device | None = None
        for (slot, dims, static, dtype), value in zip(self._expected, args):
            if (
                type(value) is not Tensor
                or value._primitive.dtype != dtype
                or (
                    dims is not None
                    and (value._primitive.shape != dims if static else not _fits(value._primitive.shape, dims))
                )
            ):
                self._bind_inputs(env, args)  # converts what it can, raises for the rest
                break
            env[slot] = value
            if device is None:
                device = value._device
        env[DEVICE_SLOT] = device = env[DEVICE_SLOT] or device or self._fallback_device
        for slot, name in self.param_slots:
            env[slot] = params[name].val()
        for slot, name in self.state_slots:
            env[slot] = states[name]
        if self.const_tensors:
            for slot, tensor in self._constants(device):
                env[slot] = tensor
        steps, labels = self._all, self._labels
        key = None
        if self.cacheable:
            key = tuple(_shape_key(env[spec.slot]) for spec in self.inputs)
            cached = self._host_cache.get(key)
            if cached is not None:
                for slot, value in cached:
                    env[slot] = value
                steps, labels, key = self._tensor_only, self._tensor_labels, None
        i = 0
        try:
            for i, (fn, ins, outs, multi, drops) in enumerate(steps):  # noqa: B007 (i names the failing step)
                result = fn(*[env[j] for j in ins])
                if multi:
                    for slot, value in zip(outs, result):
                        if slot >= 0:
                            env[slot] = value
                else:
                    env[outs] = result
                for slot in drops:
                    env[slot] = None
        except Exception as error:
            if capturing():  # ember.compile's own signals (graph breaks) pass unchanged
                raise
            if isinstance(error, OnnxError) and str(error).startswith("ember: ONNX node"):
                raise  # an operator's own check: it names the node already
            message = f"ember: ONNX {labels[i]} failed: {explain(error)}"
            if isinstance(error, EmberError):
                raise type(error)(message) from error
            raise OnnxError(message) from error
        if key is not None:
            self._host_cache[key] = [(slot, env[slot]) for slot in self.host_outputs]
            if len(self._host_cache) > HOST_CACHE_SIZE:
                self._host_cache.popitem(last=False)
        out = [env[slot] for _, slot in self.outputs]
        for i, value in enumerate(out):
            if type(value) is not Tensor and value is not None:
                out[i] = self._as_tensor(value, device, self.outputs[i][0])
        return out

    def _bind_inputs(self, env: list[Any], args: Sequence[Any]) -> Device:
        device: Device | None = None
        for spec, value in zip(self.inputs, args):
            if spec.optional and value is None:
                env[spec.slot] = None
                continue
            if spec.sequence:
                if not isinstance(value, (list, tuple)) or not all(isinstance(v, Tensor) for v in value):
                    raise DTypeError(
                        f"ember: the ONNX model's input {spec.name!r} is a sequence: give a list of ember Tensors, "
                        f"got {type(value).__name__}"
                    )
                items = [v if v.dtype is spec.dtype else v.cast(spec.dtype) for v in value]
                if device is None and items:
                    device = items[0]._device
                env[spec.slot] = items
                continue
            if not isinstance(value, Tensor):
                raise DTypeError(
                    f"ember: the ONNX model's input {spec.name!r} must be an ember Tensor, got {type(value).__name__} "
                    "(make one with Tensor.from_data(array, device=...))"
                )
            if spec.dims is not None and not _fits(value._primitive.shape, spec.dims):
                raise ShapeError(
                    f"ember: the ONNX model's input {spec.name!r} must have shape {spec.describe_dims()}, got "
                    f"{value.dims()}; a dim the export fixed cannot change (export with dynamic axes, e.g. "
                    "torch.onnx.export(..., dynamic_axes={...}), to vary it)"
                )
            if value.dtype is not spec.dtype:
                if value.dtype.kind != spec.dtype.kind:
                    raise DTypeError(
                        f"ember: the ONNX model's input {spec.name!r} must be {spec.dtype}, got {value.dtype}; "
                        f"convert it with .cast('{spec.dtype}')"
                    )
                value = value.cast(spec.dtype)
            if device is None:
                device = value._device
            env[spec.slot] = value
        if device is None:
            device = self._fallback_device
        env[DEVICE_SLOT] = device
        return device

    _fallback_device: Device  # the device the model was loaded on, set by the Planner that builds the program
    transposed: frozenset[str] = frozenset()  # parameters stored as [d_input, d_output] (see Planner)
    roles: list[InitializerRole] = []  # each initializer's role and why (set per program by the Planner)

    def _constants(self, device: Device) -> list[tuple[int, Tensor]]:
        made = self._device_consts.get(device)
        if made is None:
            made = [
                (slot, Tensor.from_data(array, device=device, dtype=dtype)) for slot, array, dtype in self.const_tensors
            ]
            if not capturing():  # inside ember.compile they are the trace's constants
                self._device_consts[device] = made
        return made

    @staticmethod
    def _as_tensor(value: Any, device: Device, name: str) -> Any:
        if isinstance(value, Tensor) or value is None:
            return value
        if isinstance(value, list):  # a sequence output: a list of tensors
            return [Program._as_tensor(v, device, name) for v in value]
        return host_to_tensor(np.asarray(value), device, f"the output {name!r}")


def explain(error: BaseException) -> str:
    """An error's message without the name of the ember op that raised it (``ember:
    max_pool2d: ...``): the ONNX node is what the user wrote, and the message names it."""
    text = str(error)
    if isinstance(error, EmberError):
        return re.sub(r"^ember: [\w.]+: ", "", text)
    return f"{type(error).__name__}: {text}"


def host_to_tensor(array: np.ndarray, device: Device, where: str) -> Tensor:
    """A host (numpy) value as a tensor on ``device`` (narrow ints widened)."""
    from ember.onnx.dtypes import dtype_of_array

    return Tensor.from_data(array, device=device, dtype=dtype_of_array(array, where))


def _shape_key(value: Any) -> Any:
    if value is None:  # an empty optional input
        return None
    if isinstance(value, list):  # a sequence input
        return tuple(tuple(v._primitive.shape) for v in value)
    return tuple(value._primitive.shape)


def _fits(shape: tuple[int, ...], dims: tuple[int | None, ...]) -> bool:
    """Whether ``shape`` has the declared ``dims`` (``None`` matches any size)."""
    return len(shape) == len(dims) and all(d is None or d == s for d, s in zip(dims, shape))


def _slots(outs: int | tuple[int, ...]) -> list[int]:
    if isinstance(outs, tuple):
        return [s for s in outs if s >= 0]
    return [outs]
