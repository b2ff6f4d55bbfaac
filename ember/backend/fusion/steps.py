"""The fusion compiler's schedule: what a plan runs, in order.

The loop-level steps (:class:`~ember.backend.kernel.steps.Kernel`,
:class:`~ember.backend.kernel.steps.Matmul`) and :class:`~ember.backend.kernel.steps.Buffer`
are the kernel IR's (:mod:`ember.backend.kernel.steps`). Here are the steps that refer
to the fusion graph: a :class:`Library` a node with a hand-written lowering
(convolution, pooling, gather/scatter); a :class:`Call` a node left to the eager
backend; a :class:`ConvChain` a convolution with the elementwise kernel and the max
pooling after it, run per sample (built by :mod:`ember.backend.fusion.chains`). A
:class:`Schedule` lists the steps with their buffers, where each returned value lives
and the run-time scalars; a lowering compiles it and a :class:`Target` tells the
analysis what that lowering can compile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember.backend.fusion.graph import Graph, Node
from ember.backend.fusion.primitive_graph import Expanded
from ember.backend.kernel.steps import Buffer, Kernel, Matmul
from ember.backend.kernel.views import View


@dataclass
class Call:
    """A lowered node run by the eager backend: ``node`` of the lowered graph, whose
    source node is ``origin``; its tensor arguments are read from ``args``."""

    node: Node
    origin: int
    args: dict[int, tuple[int, View]]  # lowered value -> (buffer, view)
    outs: list[int]  # buffer per output value

    def reads(self) -> set[int]:
        return {b for b, _ in self.args.values()}

    def writes(self) -> set[int]:
        return set(self.outs)


@dataclass
class Library:
    """A node the target lowers with a hand-written loop nest (a convolution, a pooling,
    a gather or scatter): ``node`` of the lowered graph, its tensor arguments in dense
    row-major buffers (``args``: value -> (buffer, view), each view contiguous, maybe
    at an offset, except those the target reads strided: ``Target.library_views``),
    one fresh buffer per output; ``scalars``: each run-time scalar among its arguments
    -> its slot in the plan's scalar buffer."""

    node: Node
    args: dict[int, tuple[int, View]]
    outs: list[int]
    scalars: dict[Any, int] = field(default_factory=dict)

    def reads(self) -> set[int]:
        return {b for b, _ in self.args.values()}

    def writes(self) -> set[int]:
        return set(self.outs)


@dataclass
class ConvChain:
    """A convolution, the elementwise kernel that reads its output and maybe a max
    pooling of that kernel's output, run per sample while the sample's values are in
    cache (see :mod:`ember.backend.fusion.chains`): for each sample, the convolution
    (its bias left to the epilogue), ``sample`` (the epilogue kernel over one
    sample, with the bias added to each read of the convolution's output), then the
    pooling of that sample.

    ``shifts`` gives, per buffer ``sample`` reads or writes, its elements per sample
    (its stride along the sample dim: 0 for a value every sample reads). Buffers in
    ``local`` hold one sample at a time in the step's scratch: the convolution's
    output when no other step reads it, the pooled value when only the pooling does.
    """

    conv: Library
    epilogue: Kernel
    sample: Kernel
    shifts: dict[int, int]
    pool: Library | None
    local: frozenset[int]

    def reads(self) -> set[int]:
        inner = self.conv.writes() | self.epilogue.writes()
        reads = self.conv.reads() | self.epilogue.reads() | (self.pool.reads() if self.pool else set())
        return reads - inner

    def writes(self) -> set[int]:
        writes = self.conv.writes() | self.epilogue.writes() | (self.pool.writes() if self.pool else set())
        return writes - self.local


Step = Kernel | Matmul | Call | Library | ConvChain


@dataclass
class Schedule:
    """What a target compiles: steps in run order, the buffers they use, where every
    returned value lives, and the run-time scalars (slot -> expression)."""

    graph: Graph
    expanded: Expanded
    steps: list[Step]
    buffers: list[Buffer]
    outputs: list[tuple[int, View]]  # per graph output: (buffer, view)
    scalars: list[Any]  # slot -> its SymScalar (the expansion's program computes it)
    producer: dict[int, int]  # buffer -> index of the step writing it

    def __str__(self) -> str:
        lines = [f"schedule: {len(self.steps)} steps, {len(self.buffers)} buffers"]
        for i, step in enumerate(self.steps):
            if isinstance(step, Kernel):
                red = (
                    f" reduce dim {step.dim}: " + ", ".join(f"{r.op}({r.expr!r})" for r in step.reductions)
                    if step.reductions
                    else ""
                )
                lines.append(f"  [{i}] kernel {list(step.space)}{red}")
                for s in step.stores:
                    lines.append(f"        B{s.buffer}{' (reduced)' if s.reduced else ''} = {s.expr!r}")
            elif isinstance(step, Matmul):
                lines.append(f"  [{i}] matmul B{step.out} = B{step.a[0]} {step.a[1]} @ B{step.b[0]} {step.b[1]}")
            elif isinstance(step, Library):
                args = ", ".join(f"B{b}" for b, _ in step.args.values())
                lines.append(f"  [{i}] {step.node.op}({args}) -> {[f'B{b}' for b in step.outs]}")
            elif isinstance(step, ConvChain):
                args = ", ".join(f"B{b}" for b, _ in step.conv.args.values())
                local = f" (per sample: {', '.join(f'B{b}' for b in sorted(step.local))})" if step.local else ""
                lines.append(f"  [{i}] conv chain: conv({args}) -> B{step.conv.outs[0]}{local}")
                for s in step.sample.stores:
                    lines.append(f"        B{s.buffer} = {s.expr!r}")
                if step.pool is not None:
                    lines.append(f"        {step.pool.node.op} -> {[f'B{b}' for b in step.pool.outs]}")
            else:
                lines.append(f"  [{i}] call {step.node.op} -> {[f'B{b}' for b in step.outs]}")
        return "\n".join(lines)


class Target:
    """What a lowering can compile; the analysis asks it about each node."""

    def lowers(self, graph: Graph, node: Node) -> bool:
        """Whether ``node`` (of the expanded graph) can run in compiled code."""
        raise NotImplementedError

    def matmul_needs_packing(self, view: View, dtype: np.dtype, work: int) -> bool:
        """Whether a matmul operand must be copied to a dense buffer first."""
        return False

    def library(self, graph: Graph, node: Node) -> bool:
        """Whether ``node`` (of the expanded graph) runs as a :class:`Library` step."""
        return False

    def library_views(self, graph: Graph, node: Node) -> frozenset[int]:
        """The positions of a :class:`Library` node's arguments it reads through their
        views (strided, maybe broadcast) rather than from dense copies."""
        return frozenset()
