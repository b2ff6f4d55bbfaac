"""``ember.onnx.describe``: what an ONNX file holds, and what ember can run of it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ember.errors import OnnxError
from ember.onnx import proto
from ember.onnx.dtypes import onnx_name
from ember.onnx.support import check_node, node_opset
from ember.onnx.trainable import WeightRule, subgraphs


@dataclass(frozen=True)
class TensorInfo:
    """A graph input, output or node output: name, element type, dims (ints, symbolic
    names such as ``"batch"``, or ``None`` where unknown)."""

    name: str
    dtype: str
    dims: tuple[Any, ...] | None

    def __str__(self) -> str:
        if self.dims is None:
            return f"{self.name}: {self.dtype} (shape unknown)"
        return f"{self.name}: {self.dtype}[{', '.join('?' if d is None else str(d) for d in self.dims)}]"


@dataclass(frozen=True)
class OpInfo:
    """One operator of the model: how many nodes use it, its ONNX version, whether
    ember implements it (and why not)."""

    op_type: str
    domain: str
    count: int
    version: int | None
    supported: bool
    reason: str = ""


@dataclass(frozen=True)
class NodeInfo:
    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[TensorInfo, ...]
    supported: bool


@dataclass
class ModelDescription:
    """The result of :func:`describe`; ``str()`` renders it as a report."""

    source: str
    ir_version: int
    producer: str
    opsets: dict[str, int]
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    ops: list[OpInfo]
    nodes: list[NodeInfo]
    initializers: int
    initializer_values: int
    unsupported: list[str] = field(default_factory=list)
    weights: list[str] = field(default_factory=list)  # the initializers that train by default
    weight_values: int = 0

    @property
    def supported(self) -> bool:
        """Whether ember implements every operator of the model."""
        return not self.unsupported

    def __str__(self) -> str:
        opsets = ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in sorted(self.opsets.items()))
        lines = [
            f"ONNX model {self.source}: IR version {self.ir_version}, producer {self.producer or '?'}, opsets {opsets}",
            f"initializers: {self.initializers} ({self.initializer_values:,} values), {len(self.weights)} of them "
            f"weights that train by default ({self.weight_values:,} values; OnnxModel.describe_params says why)",
            "inputs:",
            *[f"  {t}" for t in self.inputs],
            "outputs:",
            *[f"  {t}" for t in self.outputs],
            f"operators ({len(self.nodes)} nodes):",
        ]
        width = max((len(o.op_type) + (len(o.domain) + 1 if o.domain else 0) for o in self.ops), default=0)
        for o in self.ops:
            name = o.op_type if not o.domain else f"{o.domain}.{o.op_type}"
            version = f"v{o.version}" if o.version is not None else "v?"
            flag = "ok" if o.supported else f"UNSUPPORTED: {o.reason}"
            lines.append(f"  {name:<{width}}  x{o.count:<4} {version:<4} {flag}")
        if self.unsupported:
            lines.append(f"ember cannot run {len(self.unsupported)} node(s); the first: {self.unsupported[0]}")
        else:
            lines.append("ember implements every operator of this model")
        return "\n".join(lines)


def _tensor_info(info: Any) -> TensorInfo:
    parsed = proto.value_type(info)
    dtype = onnx_name(parsed[0]) if parsed is not None else "?"
    return TensorInfo(info.name, dtype.lower(), proto.dim_names(info))


def describe(source: proto.Source) -> ModelDescription:
    """List the model's operators (with their ONNX versions and whether ember
    implements them), opsets, inputs, outputs and the inferred shape of every node
    output. Raises :class:`~ember.errors.OnnxError` for a malformed file, never for an
    unsupported operator (those are flagged)."""
    try:
        file = proto.read_model(source)
    except proto.UnknownOperator as error:  # reported below, node by node
        file = error.file
    graph = file.graph
    opsets = file.opsets()
    onnx = proto.import_onnx()
    try:
        inferred = onnx.shape_inference.infer_shapes(file.light, check_type=False, strict_mode=False, data_prop=True)
        known = {info.name: info for info in [*inferred.graph.value_info, *inferred.graph.output]}
    except Exception:
        known = {}
    known.update({info.name: info for info in graph.input})
    initializer_names = {t.name for t in graph.initializer}
    counts: Counter[tuple[str, str]] = Counter()
    status: dict[tuple[str, str], tuple[int | None, bool, str]] = {}
    nodes, unsupported = [], []
    for node in graph.node:
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        key = (domain, node.op_type)
        counts[key] += 1
        _, version, problem = check_node(node, opsets)
        if key not in status:
            if problem is None:
                status[key] = (version, True, "")
            else:
                status[key] = (
                    version or proto.schema_version(node.op_type, domain, node_opset(opsets, domain)),
                    False,
                    problem.reason,
                )
        if problem is not None:
            unsupported.append(problem.describe())
        outputs = tuple(_tensor_info(known[o]) if o in known else TensorInfo(o, "?", None) for o in node.output if o)
        nodes.append(NodeInfo(node.name, node.op_type, tuple(node.input), outputs, problem is None))
    ops = [OpInfo(op_type, domain, n, *status[(domain, op_type)]) for (domain, op_type), n in counts.most_common()]
    values = 0
    for tensor in graph.initializer:
        n = 1
        for d in tensor.dims:
            n *= int(d)
        values += n
    weights, weight_values = _weights(graph, initializer_names)
    return ModelDescription(
        source=file.label,
        ir_version=int(file.model.ir_version),
        producer=" ".join(p for p in (file.model.producer_name, file.model.producer_version) if p),
        opsets=opsets,
        inputs=[_tensor_info(i) for i in graph.input if i.name not in initializer_names],
        outputs=[_tensor_info(known.get(o.name, o)) for o in graph.output],
        ops=ops,
        nodes=nodes,
        initializers=len(graph.initializer),
        initializer_values=values,
        unsupported=unsupported,
        weights=weights,
        weight_values=weight_values,
    )


def _weights(graph: Any, initializer_names: set[str]) -> tuple[list[str], int]:
    """The float initializers that ``load`` makes trainable by default, and their size."""
    floats = {}
    for tensor in [*graph.initializer, *(t for sub in subgraphs(list(graph.node)) for t in sub.initializer)]:
        if tensor.data_type in (1, 10, 11, 16):  # float, float16, double, bfloat16
            try:
                floats[tensor.name] = proto.to_array(tensor, "initializer")
            except OnnxError:
                continue
    inputs = {info.name for info in graph.input} - initializer_names
    rule = WeightRule(list(graph.node), floats, inputs)
    names = [name for name, array in floats.items() if rule.decide(name, array)[0]]
    return names, sum(int(floats[name].size) for name in names)
