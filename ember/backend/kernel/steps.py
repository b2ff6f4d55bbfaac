"""Steps of the kernel IR: loop nests and matrix products over buffers.

A :class:`Kernel` is one loop nest over an iteration space (elementwise, or with
reductions along one dim) whose :class:`Store` s write expressions
(:mod:`ember.backend.kernel.exprs`) to :class:`Buffer` s; a :class:`Matmul` is a
(batched) matrix product of two strided views. Every printer (LLVM, WGSL, CUDA C)
compiles these; the fusion compiler's graph-level steps (calls left to the eager
backend, library nodes, convolution chains) and its :class:`Schedule` live in
:mod:`ember.backend.fusion.steps`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.backend.kernel.exprs import Expr
from ember.backend.kernel.views import View, size_of
from ember.backend.ops import ReduceOp


@dataclass
class Buffer:
    """Storage for values: a graph input or constant, a result of an eager call, or a
    buffer the plan owns (``kind == "temp"``; the memory plan places it)."""

    id: int
    shape: tuple[int, ...]
    dtype: np.dtype
    kind: str  # input | const | call | temp
    value: int = -1  # the graph value it holds (input, const, call)
    scratch: bool = False  # a target's private buffer for one step (see memory.plan_memory)

    @property
    def nbytes(self) -> int:
        return size_of(self.shape) * self.dtype.itemsize


@dataclass
class Reduction:
    op: ReduceOp
    expr: Expr  # over the full space
    dtype: np.dtype  # the result's dtype
    count: int  # elements reduced (for mean)


@dataclass
class Store:
    buffer: int
    expr: Expr
    reduced: bool  # over the reduced space (an epilogue) rather than the full one


@dataclass
class Kernel:
    """One loop nest over ``space``; with reductions, along ``dim``."""

    space: tuple[int, ...]
    dim: int | None
    reductions: list[Reduction]
    stores: list[Store]

    @property
    def reduced_space(self) -> tuple[int, ...]:
        if self.dim is None:
            return self.space
        return self.space[: self.dim] + (1,) + self.space[self.dim + 1 :]

    def reads(self) -> set[int]:
        return {e.op for s in self.stores for e in s.expr.walk() if e.kind == "load"} | {
            e.op for r in self.reductions for e in r.expr.walk() if e.kind == "load"
        }

    def writes(self) -> set[int]:
        return {s.buffer for s in self.stores}


@dataclass
class Matmul:
    """``out = a @ b`` with batch dims broadcast; operands are strided views."""

    a: tuple[int, View]
    b: tuple[int, View]
    out: int
    dtype: np.dtype

    def reads(self) -> set[int]:
        return {self.a[0], self.b[0]}

    def writes(self) -> set[int]:
        return {self.out}
