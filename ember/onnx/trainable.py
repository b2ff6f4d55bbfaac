"""Which initializers of an imported graph train (``ember.onnx.load(..., trainable=)``).

An ONNX file keeps weights and constants the same way: as initializers. Exporters and
graph optimizers (the dynamo exporter, onnxsim, onnxruntime's transformer optimizer) turn
scalars such as GELU's ``pow(x, 3.0)`` exponent, attention scales, masks filled with
``finfo(float32).min`` and folded rotary tables into initializers too, and training them
breaks the model (an exponent moved by Adam's first step gives NaN at the second). By
default an initializer trains only when the graph reads it as a weight:

- the weight or bias of ``Conv`` and ``ConvTranspose``;
- an operand of ``MatMul`` or ``Gemm`` of rank >= 2, and ``Gemm``'s bias ``C``; the
  rank-1 bias added to such a product (``Add(MatMul(x, W), b)``, as torch exports Linear);
- the scale and bias of ``LayerNormalization``, ``BatchNormalization``,
  ``InstanceNormalization``, ``GroupNormalization`` (and ``RMSNormalization``,
  ``SimplifiedLayerNormalization``); the rank-1 initializer that multiplies a normalized
  value (``Mul(w, x * rsqrt(mean(x^2) + eps))``: RMSNorm, T5's and LLaMA's norms, or a
  LayerNorm written out) and the rank-1 initializer added after that product;
- ``PRelu``'s slope;
- the weights ``W``, ``R`` and bias ``B`` of ``LSTM``, ``GRU`` and ``RNN``;
- the table of a ``Gather`` on axis 0 (rank >= 2) whose indices are a graph input or
  computed by the graph: an embedding.

An initializer reaches these through ``Identity``, ``Cast`` and ``Transpose``. Everything
else is a constant, and so is every initializer holding an infinity or a NaN. The rule
sees the whole model at once: the initializers of subgraphs (``If`` branches, ``Loop``
and ``Scan`` bodies) follow it as the main graph's do, a subgraph's formal inputs count
as computed values, and a node in a subgraph that reads a value of an enclosing graph
is one of its readers. A constant
is no :class:`~ember.module.Param`: it lives in the model's compiled program (folded
into the nodes that read only constants), so optimizers never see it, ``num_params``
does not count it and ``save_file`` does not write it (the ONNX file holds it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.errors import UsageError
from ember.module import ParamGroup, ParamId

PASS_THROUGH = {"Identity", "Cast", "Transpose"}
NORMALIZATIONS = {
    "LayerNormalization",
    "BatchNormalization",
    "InstanceNormalization",
    "GroupNormalization",
    "RMSNormalization",
    "SimplifiedLayerNormalization",
}
NORM_REDUCTIONS = {"ReduceMean", "ReduceSumSquare", "ReduceL2"}
# Inputs that are weights whatever feeds the rest of the node.
WEIGHT_INPUTS: dict[str, dict[int, str]] = {
    "Conv": {1: "Conv weight", 2: "Conv bias"},
    "ConvTranspose": {1: "ConvTranspose weight", 2: "ConvTranspose bias"},
    "PRelu": {1: "PRelu slope"},
    **{
        op: {1: f"{op} input weights W", 2: f"{op} recurrent weights R", 3: f"{op} bias B"}
        for op in ("LSTM", "GRU", "RNN")
    },
    **{op: {1: f"{op} scale", 2: f"{op} bias"} for op in NORMALIZATIONS},
}


@dataclass(frozen=True)
class InitializerInfo:
    """What the ``trainable=`` callable of :func:`ember.onnx.load` is told about an
    initializer: its ``shape`` and ``dtype`` (ember's name, ``"float32"``), the operator
    types of the nodes that read it (``consumers``), whether the default rule trains it
    (``default``) and why (``reason``)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    consumers: tuple[str, ...]
    default: bool
    reason: str


Trainable = ParamGroup | Callable[[str, InitializerInfo], bool] | None


GRAPH, GRAPHS = 5, 10  # AttributeProto's types of a subgraph attribute and a list of them


def subgraphs(nodes: list[Any]) -> list[Any]:
    """Every subgraph of ``nodes`` (``If`` branches, ``Loop``/``Scan`` bodies...), nested
    ones included, outermost first."""
    found: list[Any] = []
    todo = list(nodes)
    while todo:
        node = todo.pop(0)
        for attr in node.attribute:
            graphs = [attr.g] if attr.type == GRAPH else list(attr.graphs) if attr.type == GRAPHS else []
            found.extend(graphs)
            for graph in graphs:
                todo.extend(graph.node)
    return found


class WeightRule:
    """The default rule over one graph and its subgraphs: ``decide(name, array)`` is
    ``(trains, reason)``. ``initializers`` holds the subgraphs' initializers too."""

    def __init__(self, nodes: list[Any], initializers: dict[str, np.ndarray], graph_inputs: set[str]):
        self.initializers = initializers
        inner = subgraphs(nodes)
        self.graph_inputs = graph_inputs | {info.name for graph in inner for info in graph.input}
        self.producer: dict[str, Any] = {}
        self.readers: dict[str, list[tuple[Any, int]]] = {}
        for node in [*nodes, *(sub for graph in inner for sub in graph.node)]:
            for out in node.output:
                if out:
                    self.producer[out] = node
            for i, name in enumerate(node.input):
                if name:
                    self.readers.setdefault(name, []).append((node, i))

    # ------------------------------------------------------------------ the graph around a value
    def uses(self, name: str) -> list[tuple[Any, int]]:
        """``(node, input index)`` for every node that reads ``name``, looking through
        ``Identity``, ``Cast`` and ``Transpose``."""
        found: list[tuple[Any, int]] = []
        todo, seen = [name], {name}
        while todo:
            for node, i in self.readers.get(todo.pop(), []):
                if _op(node) in PASS_THROUGH:
                    out = node.output[0]
                    if out and out not in seen:
                        seen.add(out)
                        todo.append(out)
                else:
                    found.append((node, i))
        return found

    def source(self, name: str) -> Any:
        """The node computing ``name``, looking back through ``Identity`` and ``Cast``."""
        node = self.producer.get(name)
        while node is not None and _op(node) in ("Identity", "Cast") and node.input:
            node = self.producer.get(node.input[0])
        return node

    def is_weight_init(self, name: str) -> bool:
        """``name`` is an initializer of rank >= 2 (possibly through Identity/Cast/Transpose)."""
        while name not in self.initializers:
            node = self.producer.get(name)
            if node is None or _op(node) not in PASS_THROUGH or not node.input:
                return False
            name = node.input[0]
        return self.initializers[name].ndim >= 2

    def is_projection(self, node: Any) -> bool:
        """A MatMul or Gemm with a weight operand (an initializer of rank >= 2)."""
        return _op(node) in ("MatMul", "Gemm") and any(self.is_weight_init(x) for x in node.input[:2] if x)

    def reduces(self, name: str, depth: int = 0) -> bool:
        """``name`` is a normalization's denominator: a mean of squares (or a variance)
        through Add (the epsilon), Sqrt, Reciprocal, Pow, Div (``1 / x``) and Cast."""
        node = self.producer.get(name)
        if node is None or depth > 8:
            return False
        op = _op(node)
        if op in NORM_REDUCTIONS:
            return True
        if op in ("Cast", "Identity", "Sqrt", "Reciprocal", "Pow"):
            return self.reduces(node.input[0], depth + 1)
        if op == "Add":
            return any(self.reduces(x, depth + 1) for x in node.input if x)
        if op == "Div":
            return self.reduces(node.input[1], depth + 1)
        return False

    def is_normalized(self, name: str) -> bool:
        """``name`` is a normalized value: a normalization's output, ``x / sqrt(var + eps)``
        or ``x * rsqrt(mean(x^2) + eps)``."""
        node = self.source(name)
        if node is None:
            return False
        op = _op(node)
        if op in NORMALIZATIONS:
            return True
        if op == "Div":
            return self.reduces(node.input[1])
        if op == "Mul":
            return any(self.reduces(x) for x in node.input if x)
        return False

    def is_norm_scale(self, node: Any) -> bool:
        """A ``Mul`` of a normalized value by a rank-1 initializer."""
        if _op(node) != "Mul":
            return False
        return any(self.is_normalized(x) for x in node.input if x and not self.is_vector_init(x))

    def is_vector_init(self, name: str) -> bool:
        while name not in self.initializers:
            node = self.producer.get(name)
            if node is None or _op(node) not in ("Identity", "Cast") or not node.input:
                return False
            name = node.input[0]
        return self.initializers[name].ndim == 1

    def computed(self, name: str) -> bool:
        """``name`` is a graph input or computed by a node (not an initializer or ``Constant``)."""
        if name in self.graph_inputs:
            return True
        node = self.producer.get(name)
        return node is not None and _op(node) not in ("Constant", "ConstantOfShape")

    # ------------------------------------------------------------------ the rule
    def decide(self, name: str, array: np.ndarray) -> tuple[bool, str]:
        if not bool(np.isfinite(array).all()):
            return False, "holds infinities or NaN (a mask): never trains"
        uses = self.uses(name)
        for node, i in uses:
            reason = self.weight_use(node, i, array)
            if reason:
                return True, reason
        ops = sorted({_op(node) for node, _ in uses})
        what = "a scalar" if array.size == 1 else f"a rank-{array.ndim} constant"
        return False, f"{what} read by {', '.join(ops) or 'no node'}: no weight input"

    def weight_use(self, node: Any, i: int, array: np.ndarray) -> str:
        """Why input ``i`` of ``node`` makes a weight of ``array``, or ``""``."""
        op = _op(node)
        fixed = WEIGHT_INPUTS.get(op, {}).get(i)
        if fixed:
            return fixed
        if op in ("MatMul", "Gemm") and i < 2 and array.ndim >= 2:
            return f"{op} weight"
        if op == "Gemm" and i == 2:
            return "Gemm bias"
        gather = op == "Gather" and i == 0 and array.ndim >= 2 and _attr_int(node, "axis") == 0
        if gather and len(node.input) > 1 and self.computed(node.input[1]):
            return "embedding (Gather on axis 0 with computed indices)"
        if op in ("Add", "Mul") and array.ndim == 1 and array.size > 1:
            other = [x for j, x in enumerate(node.input) if j != i and x]
            if len(other) != 1:
                return ""
            source = self.source(other[0])
            if op == "Add" and source is not None and self.is_projection(source):
                return f"bias of a {_op(source)}"
            if op == "Mul" and self.is_normalized(other[0]):
                return "scale of a normalization"
            if op == "Add" and source is not None and (self.is_norm_scale(source) or _op(source) in NORMALIZATIONS):
                return "bias of a normalization"
        return ""


def choose(
    trainable: Trainable,
    name: str,
    info: InitializerInfo,
    param_id: ParamId,
) -> tuple[bool, str]:
    """The decision for one candidate: the rule's, or the override's."""
    if trainable is None:
        return info.default, info.reason
    if isinstance(trainable, ParamGroup):
        chosen = trainable.matches(param_id, f"weights.{name}")
        return chosen, f"trainable={trainable!r} {'selects' if chosen else 'leaves'} it (rule: {info.reason})"
    answer = trainable(name, info)
    if not isinstance(answer, (bool, np.bool_)):
        raise UsageError(
            f"ember.onnx.load: trainable({name!r}, info) must return True or False, got {type(answer).__name__}"
        )
    return bool(answer), f"trainable= {'trains' if answer else 'keeps constant'} it (rule: {info.reason})"


def check_trainable(trainable: Any) -> None:
    if trainable is None or isinstance(trainable, ParamGroup) or callable(trainable):
        return
    raise UsageError(
        "ember.onnx.load: trainable= takes a ParamGroup (matched against the path 'weights.<initializer>'), "
        f"a callable (name, InitializerInfo) -> bool, or None for the default rule; got {type(trainable).__name__}"
    )


@dataclass(frozen=True)
class InitializerRole:
    """One row of :meth:`OnnxModel.describe_params`: an initializer, what it is in the
    imported model (``"trains"``, ``"frozen"`` for a parameter whose ``require_grad`` is
    off, ``"constant"`` or ``"state"``) and why."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    role: str
    reason: str

    @property
    def path(self) -> str | None:
        """The module path (``weights.<name>`` or ``states.<name>``), ``None`` for a constant."""
        if self.role == "constant":
            return None
        return ("states." if self.role == "state" else "weights.") + self.name


class ParamsDescription(list[InitializerRole]):
    """The result of :meth:`OnnxModel.describe_params`: one :class:`InitializerRole` per
    initializer the graph computes with; ``str()`` renders a table."""

    def names(self, role: str) -> list[str]:
        return [r.name for r in self if r.role == role]

    @property
    def trainable(self) -> list[str]:
        return self.names("trains")

    @property
    def constants(self) -> list[str]:
        return self.names("constant")

    def __str__(self) -> str:
        counts = {role: sum(1 for r in self if r.role == role) for role in ("trains", "frozen", "constant", "state")}
        values = {
            role: sum(int(np.prod(r.shape, dtype=np.int64)) for r in self if r.role == role)
            for role in ("trains", "constant")
        }
        head = (
            f"{counts['trains']} trainable initializer(s) ({values['trains']:,} values), {counts['frozen']} frozen, "
            f"{counts['constant']} constant ({values['constant']:,} values), {counts['state']} running state(s)"
        )
        width = max((len(r.name) for r in self), default=0)
        rows = [f"  {r.role:<8} {r.name:<{width}}  {r.dtype}[{', '.join(map(str, r.shape))}]  {r.reason}" for r in self]
        return "\n".join([head, *rows])


def _op(node: Any) -> str:
    return str(node.op_type) if node.domain in ("", "ai.onnx", "com.microsoft") else f"{node.domain}.{node.op_type}"


def _attr_int(node: Any, name: str, default: int = 0) -> int:
    for attr in node.attribute:
        if attr.name == name:
            return int(attr.i)
    return default
