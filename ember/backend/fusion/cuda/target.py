"""What the CUDA C lowering compiles in a fusion schedule, and the schedule's kernels.

:class:`CudaTarget` answers the fusion analysis (:func:`ember.backend.fusion.scheduler.schedule`):
elementwise ops lowered for their dtype family (all eight dtypes, float64 and int64
natively), layout ops, reductions along one dim, and matmuls (cuBLAS, or the integer
template). :func:`schedule_kernels` turns every :class:`~ember.backend.kernel.steps.Kernel`
step of a schedule into CUDA C with its geometry as literals and the run-time
scalars read from a ``double`` array (so one compiled plan serves every run, and a
CUDA Graph of it sees each run's learning rate and step count).
"""

from __future__ import annotations

import numpy as np

from ember.backend.cuda.codegen import KernelBuilder, KernelCode
from ember.backend.cuda.lowering import lowers_binary, lowers_unary
from ember.backend.fusion.graph import Graph, Node
from ember.backend.fusion.primitive_graph import FLOAT_EXPANSIONS, float_operands
from ember.backend.fusion.scheduler import ELEMENTWISE_OPS, LAYOUT_OPS, Target
from ember.backend.fusion.steps import Schedule
from ember.backend.kernel.steps import Kernel
from ember.backend.kernel.views import size_of

#: Composites the CUDA lowering expands into primitives (float32/float64 operands).
EXPANDED = FLOAT_EXPANSIONS


class CudaTarget(Target):
    """The CUDA C lowering's capabilities (see the module docstring)."""

    def expands(self, graph: Graph, node: Node) -> bool:
        return node.op in EXPANDED and float_operands(graph, node)

    def lowers(self, graph: Graph, node: Node) -> bool:
        avals = graph.avals
        op = node.op
        if op in LAYOUT_OPS:
            return True
        if op == "unary":
            return lowers_unary(node.args[0], avals[node.args[1]].dtype)
        if op == "binary":
            return lowers_binary(node.args[0], avals[node.args[1]].dtype)
        if op in ELEMENTWISE_OPS:
            return True
        if op == "reduce":
            _, x, dim = node.args
            return avals[x].shape[dim] > 0
        if op == "matmul":
            a, b = node.args
            return len(avals[a].shape) >= 2 and len(avals[b].shape) >= 2
        return False


def schedule_kernels(sched: Schedule, prefix: str = "f") -> dict[int, KernelCode]:
    """The CUDA C of every non-empty kernel step of ``sched``, by step index."""
    dtypes = {b.id: np.dtype(b.dtype) for b in sched.buffers}
    out = {}
    for index, step in enumerate(sched.steps):
        if isinstance(step, Kernel) and size_of(step.space):
            out[index] = KernelBuilder(step, dtypes, static=True, scalars="array", name=f"{prefix}_k{index}").build()
    return out


__all__ = ["EXPANDED", "CudaTarget", "schedule_kernels"]
