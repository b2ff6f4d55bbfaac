"""``ai.onnx.preview.FlexAttention``: scaled dot-product attention whose scores and
probabilities pass through the model's own subgraphs (``score_mod``, ``prob_mod``: one
tensor in, one out), as PyTorch's ``flex_attention``.

The subgraphs are planned once, as blocks of steps over the program's slots (as a
``Loop`` body, :mod:`ember.onnx.control`); the node's step computes
``(Q * sqrt(scale)) @ (K * sqrt(scale))^T`` (key and value heads repeated for grouped
queries), runs ``score_mod`` on the scores, a softmax over the keys in the softmax
precision (``softmax_precision``, else float32 for 16-bit inputs), ``prob_mod`` on the
probabilities, and the product with ``V``, all with ember's tensor ops: differentiable
on an autodiff device.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.backend.dtype import DType
from ember.errors import OnnxError
from ember.onnx import proto
from ember.onnx.control import _run, _slots, _tensor, plan_branch
from ember.onnx.dtypes import ember_dtype
from ember.onnx.program import DEVICE_SLOT, Step
from ember.tensor import Tensor

if TYPE_CHECKING:
    from ember.onnx.plan import Planner

#: a planned subgraph: its steps, the slot of its one input and of its one output
Block = tuple[list[Any], int, int]


def add_flex_attention(planner: Planner, node: Any) -> None:
    """Plan a FlexAttention node: its two optional subgraphs, then one step."""
    from ember.onnx.plan import TENSOR, Value, outputs_of

    where = f"{planner.label}: FlexAttention node {node.name!r}"
    attrs = proto.attributes(node, where)
    unknown = sorted(set(attrs) - {"scale", "score_mod", "prob_mod", "softmax_precision"})
    if unknown:
        raise OnnxError(f"ember: {where}: attribute {unknown[0]!r} is not supported")
    if len(node.input) != 3 or not all(node.input):
        raise OnnxError(f"ember: {where} takes Q, K and V")
    ins = []
    for name in node.input:
        value = planner.values.get(name)
        if value is None:
            raise OnnxError(f"ember: {where} reads {name!r}, which no earlier node, input or initializer defines")
        ins.append(planner.tensor_input(name, value))
    blocks: dict[str, Block] = {}
    reads: set[int] = set()
    for key in ("score_mod", "prob_mod"):
        graph = attrs.get(key)
        if graph is None:
            continue
        if len(graph.input) != 1 or len(graph.output) != 1:
            raise OnnxError(f"ember: {where}: {key} must take one tensor and give one")
        saved = planner.steps, dict(planner.to_tensor_slot), dict(planner.to_host_slot)
        planner.steps = []
        try:
            formal = planner.new_slot()
            (result,) = plan_branch(planner, graph, f"{where}: {key}", {graph.input[0].name: Value(TENSOR, formal)})
            steps = planner.steps
        finally:
            planner.steps, planner.to_tensor_slot, planner.to_host_slot = saved
        out = planner.new_slot(result.const) if result.kind == "const" else result.slot
        produced = {s for step in steps for s in _slots(step.outs)} | {formal}
        reads |= ({i for step in steps for i in step.ins} | {out}) - produced
        blocks[key] = ([(s.fn, s.ins, s.outs) for s in steps], formal, out)
    outer = sorted(reads | {DEVICE_SLOT})
    precision = attrs.get("softmax_precision")
    compute = None if precision is None else ember_dtype(int(precision), f"{where}: softmax_precision")
    scale = attrs.get("scale")
    run = FlexAttention(blocks, outer, None if scale is None else float(scale), compute, where)
    (name,) = outputs_of(node)
    slot = planner.new_slot()
    planner.values[name] = Value(TENSOR, slot, None, None)
    label = f"node {node.name!r} (FlexAttention)" if node.name else "node (unnamed) (FlexAttention)"
    planner.steps.append(Step(run, (*ins, *outer), slot, False, label))


class FlexAttention:
    """The run-time FlexAttention (see the module's docstring)."""

    def __init__(
        self, blocks: dict[str, Block], outer: list[int], scale: float | None, compute: DType | None, where: str
    ):
        self.blocks, self.outer, self.scale, self.compute, self.where = blocks, outer, scale, compute, where

    def _mod(self, key: str, x: Tensor, base: dict[int, Any]) -> Tensor:
        block = self.blocks.get(key)
        if block is None:
            return x
        steps, formal, out = block
        env = dict(base)
        env[formal] = x
        _run(steps, env)
        return _tensor(env[out], base[DEVICE_SLOT]).cast(x.dtype)

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, *rest: Any) -> Tensor:
        base = dict(zip(self.outer, rest))
        if q.rank != 4 or k.rank != 4 or v.rank != 4:
            raise OnnxError(f"ember: {self.where}: Q {q.dims()}, K {k.dims()} and V {v.dims()} must be 4-D")
        heads, kv_heads = q.dims()[1], k.dims()[1]
        if v.dims()[1] != kv_heads or kv_heads == 0 or heads % kv_heads:
            raise OnnxError(
                f"ember: {self.where}: Q's heads ({heads}) must be a multiple of K's and V's ({k.dims()}, {v.dims()})"
            )
        if heads != kv_heads:
            k, v = k.repeat_interleave(heads // kv_heads, 1), v.repeat_interleave(heads // kv_heads, 1)
        scale = self.scale if self.scale is not None else 1.0 / math.sqrt(q.dims()[3])
        root = float(np.sqrt(np.float32(scale)))  # in float32, as ONNX's reference
        scores = q.mul_scalar(root).matmul(k.mul_scalar(root).permute([0, 1, 3, 2]))
        compute = self.compute or (DType.FLOAT32 if q.dtype in (DType.FLOAT16, DType.BFLOAT16) else q.dtype)
        scores = self._mod("score_mod", scores.cast(compute), base)
        probs = self._mod("prob_mod", scores.softmax(-1), base)
        return probs.matmul(v.cast(compute)).cast(v.dtype)
