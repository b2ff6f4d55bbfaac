"""From a checked ONNX graph to a :class:`~ember.onnx.program.Program` and the
module's parameters.

Every value of the graph is one of three kinds:

- **const**: known at load (initializers that are not parameters, ``Constant``
  nodes, and everything computed from constants only, folded here; ``Shape`` of a
  tensor whose shape the model fixes);
- **host**: computed in numpy at ``forward`` from shapes only (``Shape`` of a tensor
  with a dynamic dim, and arithmetic on such values);
- **tensor**: an ember Tensor (graph inputs, parameters, and every op on them).

Float initializers that feed tensor ops as weights (:mod:`ember.onnx.trainable`'s rule,
or ``load(..., trainable=)``) become :class:`~ember.module.Param` s (named by the
initializer); those that feed a BatchNormalization's mean or variance become
:class:`~ember.module.RunningState` s; the rest are constants.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.device import Device
from ember.errors import OnnxError
from ember.module import Param, ParamId, RunningState
from ember.onnx import proto
from ember.onnx.control import CONTROL_FLOW, add_control
from ember.onnx.dtypes import dtype_of_array, ember_dtype
from ember.onnx.flex_attention import add_flex_attention
from ember.onnx.ops import Node, OpDef
from ember.onnx.program import DEVICE_SLOT, NONE_SLOT, InputSpec, Program, Step, explain, host_to_tensor
from ember.onnx.quant_weights import QuantizedUse, add_quantized, find_quantized_weights
from ember.onnx.support import (
    WRAPPING,
    Unsupported,
    check_attributes,
    check_node,
    narrow,
    node_opset,
    unsupported_error,
)
from ember.onnx.trainable import InitializerInfo, InitializerRole, Trainable, WeightRule, choose, subgraphs
from ember.tensor import Tensor

CONST, HOST, TENSOR = "const", "host", "tensor"
STATE_INPUTS = {"BatchNormalization": {3: "running_mean", 4: "running_var"}}
MULTI_RESULT = {"Split"}  # return a tuple even for one output


@dataclass
class Value:
    kind: str
    slot: int = -1
    const: np.ndarray | None = None
    shape: tuple[int | None, ...] | None = None


def _known_shape(shape: tuple[int | None, ...] | None) -> tuple[int, ...] | None:
    """``shape`` when every dim is known, else ``None``."""
    if shape is None or None in shape:
        return None
    return tuple(d for d in shape if d is not None)


class Planner:
    """Walks the graph once, folding constants and emitting steps."""

    def __init__(self, file: proto.ModelFile, device: Device, untie: bool = True, trainable: Trainable = None):
        self.file = file
        self.label = file.label
        self.device = device
        self.graph = file.graph
        self.opsets = file.opsets()
        self.values: dict[str, Value] = {}
        self.template: list[Any] = [None, None]  # DEVICE_SLOT, NONE_SLOT
        self.steps: list[Step] = []
        self.params: dict[str, Param] = {}
        self.states: dict[str, RunningState] = {}
        self.param_slots: list[tuple[int, str]] = []
        self.state_slots: list[tuple[int, str]] = []
        self.const_tensors: list[tuple[int, np.ndarray, Any]] = []
        self.const_slot_of: dict[int, int] = {}  # id(const Value) -> its tensor slot
        self.to_tensor_slot: dict[str, int] = {}
        self.to_host_slot: dict[str, int] = {}
        self.data_dependent = False
        self.untie = untie
        self.pinned: set[int] = {DEVICE_SLOT, NONE_SLOT}  # slots never dropped
        self.overrides: dict[int, dict[str, Any]] = {}  # id(node) -> attributes replaced at load
        self.transposed: frozenset[str] = frozenset()
        self.trainable = trainable
        self.roles: list[InitializerRole] = []  # what each initializer became, and why
        self.quantized: dict[int, QuantizedUse] = {}  # id(node) -> the quantized weight it reads
        self.retired: list[Value] = []  # a subgraph's values, kept alive: const_slot_of keys on their ids

    # ------------------------------------------------------------------ slots
    def new_slot(self, value: Any = None) -> int:
        self.template.append(value)
        return len(self.template) - 1

    # ------------------------------------------------------------------ the whole graph
    def build(self) -> tuple[Program, dict[str, Param], dict[str, RunningState]]:
        graph = self.graph
        initializers = self.read_initializers()
        nodes = list(graph.node)
        if self.untie:
            nodes = self.untie_aliases(nodes, initializers)
        checked = self.check_ops(nodes)
        nodes, checked, self.quantized = find_quantized_weights(nodes, checked, initializers, graph.output)
        inner = self.subgraph_initializers(nodes, initializers)
        uses = self.initializer_uses(nodes, checked, {**initializers, **inner})
        self.transposed = self.transpose_linear_weights(nodes, initializers)
        self.shapes = proto.infer_shapes(self.file)
        inputs = self.graph_inputs(initializers)
        rule = WeightRule(nodes, {**initializers, **inner}, {spec.name for spec in inputs})
        self.make_leaves(initializers, uses, rule)
        self.make_leaves(inner, uses, rule, subgraph=True)
        for node, (opdef, version) in zip(nodes, checked):
            self.add_node(node, opdef, version)
        outputs = []
        for out in graph.output:
            value = self.values.get(out.name)
            if value is None:
                raise OnnxError(f"ember: {self.label}: the graph output {out.name!r} is computed by no node")
            if value.kind == CONST:
                slot = self.new_slot(value.const)
            else:
                slot = value.slot
            outputs.append((out.name, slot))
        steps = self.with_drops({slot for _, slot in outputs})
        program = Program(
            len(self.template),
            self.template,
            inputs,
            self.param_slots,
            self.state_slots,
            self.const_tensors,
            steps,
            outputs,
            self.data_dependent,
        )
        program._fallback_device = self.device
        program.transposed = self.transposed & frozenset(self.params)
        program.roles = self.roles
        return program, self.params, self.states

    def read_initializers(self) -> dict[str, np.ndarray]:
        if len(self.graph.sparse_initializer):
            raise OnnxError(f"ember: {self.label}: sparse initializers are not supported")
        out = {}
        for tensor in self.graph.initializer:
            out[tensor.name] = proto.to_array(tensor, f"{self.label}: initializer {tensor.name!r}")
        return out

    def subgraph_initializers(self, nodes: list[Any], initializers: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The initializers of every subgraph (``If`` branches, ``Loop``/``Scan`` bodies),
        by name: the weight rule decides them as the main graph's. A name that two graphs
        define stays a constant of each (``plan_branch`` reads it per subgraph)."""
        found: dict[str, np.ndarray] = {}
        reused: set[str] = set()
        for graph in subgraphs(nodes):
            if len(graph.sparse_initializer):
                raise OnnxError(f"ember: {self.label}: sparse initializers are not supported (subgraph {graph.name!r})")
            for tensor in graph.initializer:
                if tensor.name in found or tensor.name in initializers:
                    reused.add(tensor.name)
                    continue
                where = f"{self.label}: initializer {tensor.name!r} of subgraph {graph.name!r}"
                found[tensor.name] = proto.to_array(tensor, where)
        return {name: array for name, array in found.items() if name not in reused}

    def untie_aliases(self, nodes: list[Any], initializers: dict[str, np.ndarray]) -> list[Any]:
        """``Identity(initializer)`` is how exporters deduplicate initializers with equal
        values (fresh LayerNorm weights are all ones): each alias becomes an initializer of
        its own, named by its output, so that layers that happened to be equal are not tied."""
        kept = []
        for node in nodes:
            if (
                node.op_type == "Identity"
                and node.domain in ("", "ai.onnx")
                and len(node.input) == 1
                and node.input[0] in initializers
                and node.output[0] not in initializers
            ):
                initializers[node.output[0]] = initializers[node.input[0]].copy()
                continue
            kept.append(node)
        return kept

    def transpose_linear_weights(self, nodes: list[Any], initializers: dict[str, np.ndarray]) -> frozenset[str]:
        """Weights read only as ``Gemm(x, W, transB=1)`` (PyTorch's Linear) are stored as
        ember's Linear stores them, ``[d_input, d_output]``: the layer then runs as one
        fused ``linear`` with no transpose per call, forward and backward."""
        readers: dict[str, list[tuple[Any, int]]] = {}
        for node in nodes:
            for i, name in enumerate(node.input):
                if name in initializers:
                    readers.setdefault(name, []).append((node, i))
        for out in self.graph.output:
            readers.setdefault(out.name, []).append((None, -1))
        for graph in subgraphs(nodes):  # a subgraph reading the weight keeps its layout
            for sub in graph.node:
                for name in sub.input:
                    if name in initializers:
                        readers.setdefault(name, []).append((None, -1))
        chosen = set()
        for name, uses in readers.items():
            array = initializers.get(name)
            if array is None or array.dtype.kind != "f" or array.ndim != 2:
                continue
            if all(
                node is not None
                and i == 1
                and node.op_type == "Gemm"
                and node.domain in ("", "ai.onnx")
                and _attr_int(node, "transB") == 1
                and _attr_int(node, "transA") == 0
                for node, i in uses
            ):
                initializers[name] = np.ascontiguousarray(array.T)
                chosen.add(name)
                for node, _ in uses:
                    self.overrides[id(node)] = {"transB": 0}
        return frozenset(chosen)

    def check_ops(self, nodes: list[Any]) -> list[tuple[OpDef, int]]:
        found: list[Unsupported] = []
        checked: list[tuple[OpDef, int]] = []
        for node in nodes:
            opdef, version, problem = check_node(node, self.opsets)
            if problem is not None:
                found.append(problem)
            else:
                assert opdef is not None  # check_node finds no problem only with an OpDef
                checked.append((opdef, version))
        if found:
            raise unsupported_error(found, self.label)
        return checked

    def initializer_uses(
        self, nodes: list[Any], checked: list[tuple[OpDef, int]], initializers: dict[str, np.ndarray]
    ) -> dict[str, set[str]]:
        """``{initializer: {"host", "tensor", "state"}}``: how the nodes read it."""
        uses: dict[str, set[str]] = {name: set() for name in initializers}
        inner = [(sub, check_node(sub, self.opsets)[0]) for graph in subgraphs(nodes) for sub in graph.node]
        for node, opdef in [*((node, opdef) for node, (opdef, _) in zip(nodes, checked)), *inner]:
            if opdef is None:  # refused when its subgraph is planned
                continue
            states = STATE_INPUTS.get(node.op_type, {})
            for i, name in enumerate(node.input):
                if name in uses:
                    uses[name].add("host" if i in opdef.host else "state" if i in states else "tensor")
        for out in self.graph.output:
            if out.name in uses:
                uses[out.name].add("tensor")
        return uses

    def graph_inputs(self, initializers: dict[str, np.ndarray]) -> list[InputSpec]:
        specs = []
        for info in self.graph.input:
            if info.name in initializers:  # IR < 4 lists initializers as inputs too
                continue
            parsed = proto.value_type(info)
            kind = info.type
            optional = kind.WhichOneof("value") == "optional_type"
            if optional:  # the element's type; the model takes None for an empty optional
                kind = kind.optional_type.elem_type
                parsed = (kind.tensor_type.elem_type, None) if kind.WhichOneof("value") == "tensor_type" else None
            sequence = kind.WhichOneof("value") == "sequence_type"
            element = kind.sequence_type.elem_type if sequence else None
            if sequence and element is not None and element.WhichOneof("value") == "tensor_type":
                parsed = (element.tensor_type.elem_type, None)  # a list of tensors
            else:
                sequence = False
            if parsed is None:
                raise OnnxError(
                    f"ember: {self.label}: the graph input {info.name!r} is {proto.type_name(info.type)}: "
                    "ember.onnx takes tensors, sequences of tensors and optional ones as graph inputs "
                    "(maps and sparse tensors are not supported)"
                )
            elem, dims = parsed
            dtype = ember_dtype(elem, f"{self.label}: input {info.name!r}")
            slot = self.new_slot()
            self.values[info.name] = Value(TENSOR, slot, None, dims)
            specs.append(InputSpec(info.name, slot, dtype, dims, proto.dim_names(info), sequence, optional))
        return specs

    def make_leaves(
        self, initializers: dict[str, np.ndarray], uses: dict[str, set[str]], rule: WeightRule, subgraph: bool = False
    ) -> None:
        """Each initializer as a ``Param`` or a constant (``subgraph``: a subgraph's, whose
        constants ``plan_branch`` defines when it plans the subgraph)."""
        device = self.device
        for name, array in initializers.items():
            used = uses.get(name, set())
            trains, reason, param_id = False, "", ParamId()
            if "tensor" in used and array.dtype.kind == "f":
                trains, reason = self.decide(name, array, rule, param_id)
            if trains:
                dtype = dtype_of_array(array, f"{self.label}: initializer {name!r}")
                tensor = Tensor.from_data(array, device=device, dtype=dtype)
                self.params[name] = Param(param_id, tensor, True)
                slot = self.new_slot()
                self.param_slots.append((slot, name))
                self.pinned.add(slot)
                self.values[name] = Value(TENSOR, slot, None, array.shape)
            elif not subgraph:
                self.values[name] = Value(CONST, -1, array, array.shape)
            if reason:
                dtype_name = str(dtype_of_array(array, f"{self.label}: initializer {name!r}"))
                role = "trains" if trains else "constant"
                self.roles.append(InitializerRole(name, tuple(array.shape), dtype_name, role, reason))
            if "state" in used and not subgraph:
                self.values[name].const = array  # each BatchNormalization copies it into a state

    def decide(self, name: str, array: np.ndarray, rule: WeightRule, param_id: ParamId) -> tuple[bool, str]:
        """Whether the float initializer ``name`` (read as a tensor) trains, and why."""
        default, reason = rule.decide(name, array)
        if self.trainable is None:
            return default, reason
        consumers = tuple(sorted({str(node.op_type) for node, _ in rule.uses(name)}))
        dtype = str(dtype_of_array(array, f"{self.label}: initializer {name!r}"))
        info = InitializerInfo(name, tuple(array.shape), dtype, consumers, default, reason)
        trains, why = choose(self.trainable, name, info, param_id)
        if trains and not np.isfinite(array).all():
            return False, "holds infinities or NaN (a mask): never trains, even when trainable= selects it"
        return trains, why

    # ------------------------------------------------------------------ one node
    def node_view(self, node: Any, version: int, values: list[Value | None]) -> Node:
        where = f"{self.label}: {node.op_type} node {node.name!r}"
        attrs = proto.attributes(node, where)
        attrs.update(self.overrides.get(id(node), {}))
        consts = [v.const if v is not None and v.kind == CONST else None for v in values]
        shapes = [v.shape if v is not None else None for v in values]
        types = [self.shapes.get(name, (None, None))[0] if name else None for name in node.input]
        out_types = [self.shapes.get(name, (None, None))[0] if name else None for name in outputs_of(node)]
        return Node(
            node.op_type,
            node.name,
            version,
            node_opset(self.opsets, node.domain),
            attrs,
            list(node.input),
            outputs_of(node),
            consts,
            shapes,
            types,
            out_types,
        )

    def add_node(self, node: Any, opdef: OpDef, version: int) -> None:
        if node.op_type in CONTROL_FLOW and node.domain in ("", "ai.onnx"):
            add_control(self, node)
            return
        if node.op_type == "FlexAttention" and node.domain == "ai.onnx.preview":
            add_flex_attention(self, node)
            return
        if id(node) in self.quantized:  # reads a quantized weight (ember/onnx/quant_weights.py)
            return add_quantized(self, node, opdef, version, self.quantized[id(node)])
        values: list[Value | None] = []
        for name in node.input:
            if name == "":
                values.append(None)
                continue
            value = self.values.get(name)
            if value is None:
                raise OnnxError(
                    f"ember: {self.label}: {node.op_type} node {node.name!r} reads {name!r}, "
                    "which no earlier node, input or initializer defines"
                )
            values.append(value)
        view = self.node_view(node, version, values)
        present = [v for v in values if v is not None]
        if opdef.shape_of:
            x = values[0] if values else None
            if x is None:
                raise OnnxError(f"ember: {self.label}: {node.op_type} node {node.name!r} has no input")
            known = _known_shape(x.shape)
            if x.kind == TENSOR and known is not None:
                self.fold(node, opdef, view, [np.broadcast_to(np.empty((), np.bool_), known)])
            elif x.kind == TENSOR:
                self.emit_host(node, opdef, view, values, shape_of=True)
            elif x.kind == CONST:
                self.fold(node, opdef, view, [x.const])
            else:
                self.emit_host(node, opdef, view, values)
            return
        host_only = all(i in opdef.host for i, v in enumerate(values) if v is not None)
        eager = opdef.training or opdef.eager  # never folded nor run on the host
        if all(v.kind == CONST for v in present) and not eager and node.op_type not in STATE_INPUTS:
            self.fold(node, opdef, view, [None if v is None else v.const for v in values])
        elif (all(v.kind in (CONST, HOST) for v in present) and not eager) or (present and host_only):
            self.emit_host(node, opdef, view, values)
        else:
            self.emit_tensor(node, opdef, view, values)
        check_attributes(self.label, node, opdef, view)

    def host_function(self, opdef: OpDef, view: Node) -> Callable[..., Any]:
        """The operator over numpy arrays: its numpy form, or its tensor form on flex."""
        if opdef.numpy is not None:
            return opdef.numpy(view)
        fn = opdef.build(view)
        flex = Device.flex()
        host_inputs = opdef.host

        def via_flex(*args: Any) -> Any:
            moved = [
                a if a is None or i in host_inputs else host_to_tensor(np.asarray(a), flex, view.label)
                for i, a in enumerate(args)
            ]
            out = fn(*moved)
            if isinstance(out, (tuple, list)):
                return tuple(o.to_numpy() if isinstance(o, Tensor) else o for o in out)
            return out.to_numpy() if isinstance(out, Tensor) else out

        return via_flex

    def results(self, node: Any, out: Any) -> list[Any]:
        names = outputs_of(node)
        out = list(out) if len(names) > 1 or node.op_type in MULTI_RESULT else [out]
        if len(out) < len(names):
            raise OnnxError(
                f"ember: {self.label}: {node.op_type} node {node.name!r} made {len(out)} outputs, "
                f"the graph reads {len(names)}"
            )
        return out

    def fold(self, node: Any, opdef: OpDef, view: Node, args: list[Any]) -> None:
        try:
            with np.errstate(all="ignore"):  # ONNX's float semantics: log(0) is -inf, no warning
                out = self.host_function(opdef, view)(*args)
        except OnnxError:
            raise
        except Exception as error:
            raise OnnxError(
                f"ember: {self.label}: folding the constant ONNX {view.described()} failed: {explain(error)}"
            ) from error
        for name, value in zip(outputs_of(node), self.results(node, out)):
            if name:
                array = np.asarray(value)
                self.values[name] = Value(CONST, -1, array, array.shape)

    def emit_host(
        self, node: Any, opdef: OpDef, view: Node, values: list[Value | None], shape_of: bool = False
    ) -> None:
        fn = opdef.build(view) if shape_of else self.host_function(opdef, view)
        ins = tuple(
            self.host_input(v, i in opdef.host or not shape_of) if v is not None else NONE_SLOT
            for i, v in enumerate(values)
        )
        outs = self.output_slots(node, HOST)
        self.steps.append(Step(fn, ins, outs, True, view.described()))
        if opdef.data_dependent:
            self.data_dependent = True

    def emit_tensor(self, node: Any, opdef: OpDef, view: Node, values: list[Value | None]) -> None:
        fn = opdef.build(view)
        if node.op_type in WRAPPING:
            names = outputs_of(node)
            info = self.shapes.get(names[0]) if len(names) == 1 else None
            fn = narrow(fn, None if info is None else info[0])
        states = STATE_INPUTS.get(node.op_type, {})
        ins = []
        for i, v in enumerate(values):
            if v is None:
                ins.append(NONE_SLOT)
            elif i in opdef.host:
                ins.append(self.host_input(v, True))
            elif i in states and v.const is not None and node.input[i] in self.values:
                ins.append(self.state_input(node, i, states[i], v))
            else:
                ins.append(self.tensor_input(node.input[i], v))
        outs = self.output_slots(node, TENSOR)
        self.steps.append(Step(fn, tuple(ins), outs, False, view.described()))
        if opdef.data_dependent:
            self.data_dependent = True

    def output_slots(self, node: Any, kind: str) -> int | tuple[int, ...]:
        slots = []
        names = outputs_of(node)
        for name in names:
            if not name:
                slots.append(-1)
                continue
            slot = self.new_slot()
            info = self.shapes.get(name)
            self.values[name] = Value(kind, slot, None, None if info is None else info[1])
            slots.append(slot)
        if len(names) > 1 or node.op_type in MULTI_RESULT:
            return tuple(slots)
        return slots[0]

    # ------------------------------------------------------------------ inputs of a step
    def host_input(self, value: Value, host: bool) -> int:
        """The slot of ``value`` as a numpy array (``host``) or as it is (a tensor read
        by Shape)."""
        if value.kind == CONST:
            return self.new_slot(value.const)
        if value.kind == HOST or not host:
            return value.slot
        # A tensor where the operator needs host values: read back at every call.
        key = f"slot{value.slot}"
        slot = self.to_host_slot.get(key)
        if slot is None:
            slot = self.new_slot()
            self.steps.append(Step(_to_host, (value.slot,), slot, False, "read-back of a tensor for a shape argument"))
            self.to_host_slot[key] = slot
            self.data_dependent = True
        return slot

    def tensor_input(self, name: str, value: Value) -> int:
        if value.kind == TENSOR:
            return value.slot
        if value.kind == CONST:
            slot = self.const_slot_of.get(id(value))
            if slot is None:
                array = value.const
                assert array is not None  # a CONST value holds its array
                slot = self.new_slot()
                self.const_tensors.append((slot, array, dtype_of_array(array, f"{self.label}: constant {name!r}")))
                self.const_slot_of[id(value)] = slot
                self.pinned.add(slot)
            return slot
        slot = self.to_tensor_slot.get(name)
        if slot is None:
            slot = self.new_slot()
            self.steps.append(
                Step(_to_tensor, (value.slot, DEVICE_SLOT), slot, False, f"conversion of {name!r} to a tensor")
            )
            self.to_tensor_slot[name] = slot
        return slot

    def state_input(self, node: Any, i: int, role: str, value: Value) -> int:
        init = node.input[i]
        name = init if init not in self.states else f"{node.name or node.output[0]}.{role}"
        while name in self.states:
            name += "_"
        array = value.const
        assert array is not None  # make_leaves keeps the array of an initializer a state reads
        dtype = dtype_of_array(array, f"{self.label}: initializer {init!r}")
        self.states[name] = RunningState(Tensor.from_data(array, device=self.device, dtype=dtype))
        where = f"{node.op_type} node {node.name!r}" if node.name else node.op_type
        self.roles.append(InitializerRole(name, tuple(array.shape), str(dtype), "state", f"{role} of {where}"))
        slot = self.new_slot()
        self.state_slots.append((slot, name))
        self.pinned.add(slot)
        return slot

    # ------------------------------------------------------------------ liveness
    def with_drops(self, kept: set[int]) -> list[Step]:
        """Each step with the tensor slots whose last reader it is (freed as it ends)."""
        last: dict[int, int] = {}
        for index, step in enumerate(self.steps):
            for slot in step.ins:
                last[slot] = index
        inputs = {v.slot for v in self.values.values() if v.kind == TENSOR} - {
            s for step in self.steps for s in ((step.outs,) if isinstance(step.outs, int) else step.outs)
        }
        host = {
            slot
            for step in self.steps
            if step.host
            for slot in ((step.outs,) if isinstance(step.outs, int) else step.outs)
        }  # kept per input shape
        never = self.pinned | kept | inputs | host
        drops: dict[int, list[int]] = {}
        for slot, index in last.items():
            if slot not in never and self.template[slot] is None:
                drops.setdefault(index, []).append(slot)
        for index, step in enumerate(self.steps):
            if not step.host:
                step.drops = tuple(drops.get(index, ()))
        return self.steps


def _to_host(tensor: Tensor) -> np.ndarray:
    return tensor.to_numpy()


def _to_tensor(array: Any, device: Device) -> Tensor:
    return host_to_tensor(np.asarray(array), device, "a shape value")


def _attr_int(node: Any, name: str) -> int:
    for attr in node.attribute:
        if attr.name == name:
            return int(attr.i)
    return 0


def outputs_of(node: Any) -> list[str]:
    """The node's outputs without trailing omitted ones."""
    names = list(node.output)
    while names and names[-1] == "":
        names.pop()
    return names
