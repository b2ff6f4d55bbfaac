"""Steps of the kernel IR: loop nests and matrix products over buffers.

A :class:`Kernel` is one loop nest over an iteration space (elementwise, or with
reductions along one dim) whose :class:`Store` s write expressions
(:mod:`ember.backend.kernel.exprs`) to :class:`Buffer` s; a :class:`Matmul` is a
(batched) matrix product of two strided views. Every printer (LLVM, WGSL, CUDA C)
compiles these. A :class:`RowProgram` is a kernel whose sizes are arguments (compiled
once, run at any shape) over a ``[rows, cols]`` space walked row by row: per row,
several :class:`Pass` es over its columns share the row loop, so that a row stays in
cache between them (softmax: the maximum, then the sum of exponentials, then the
quotient). The LLVM printer compiles these (flex's native kernels); the fusion compiler's graph-level steps (calls left to the eager
backend, library nodes, convolution chains) and its :class:`Schedule` live in
:mod:`ember.backend.fusion.steps`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


@dataclass(frozen=True)
class RowView:
    """An access of a :class:`RowProgram`: element ``(r, c)`` of its run-time
    ``[rows, cols]`` space is element ``r * (row_cols * cols + row_step) + c *
    col_step + offset_cols * cols`` of the buffer. A dense ``[rows, cols]`` array is
    ``RowView(1, 0, 1)``, a per-column vector ``RowView(0, 0, 1)``, a per-row one
    ``RowView(0, 1, 0)``, block ``k`` of a ``[rows, 4 cols]`` array ``RowView(4, 0, 1, k)``."""

    row_cols: int
    row_step: int
    col_step: int
    offset_cols: int = 0


@dataclass
class RowStore:
    buffer: int  # the program's buffer argument
    view: RowView
    expr: Expr


@dataclass
class Pass:
    """One loop over a row's columns: ``reductions`` over them (read after the pass
    as ``acc`` expressions with op ``(pass, k)``) and ``stores``; skipped for a row
    where ``when`` (a bool of scalars and row values) is false."""

    reductions: list[Reduction] = field(default_factory=list)
    stores: list[RowStore] = field(default_factory=list)
    when: Expr | None = None
    #: Values computed first, in this order: the order of the instructions decides
    #: which NaN an operation on two NaNs returns, so a kernel that must keep an
    #: older version's bits (flex's LSTM cell) fixes it.
    order: list[Expr] = field(default_factory=list)


@dataclass
class RowProgram:
    """A kernel over a ``[rows, cols]`` space whose sizes are arguments.

    Its function takes a pointer per entry of ``buffers`` (their element dtypes, in
    argument order), then ``rows`` (when ``by_rows``) and ``cols`` as int64, then one
    argument per entry of ``scalars`` (``scalar`` expressions with op ``k``). Per row
    it runs ``passes`` in order, then ``row_stores`` (values of the row). Without
    ``by_rows`` it is one elementwise pass over ``cols`` elements.

    Reductions follow flex's native kernels: a sum accumulates in its dtype,
    reassociated (so it vectorises); a float32 maximum compares the values' ordered
    integer keys (NaN with the sign bit clear ranks above ``inf``, one with it set
    below ``-inf``), which vectorises without fast-math flags.
    """

    name: str
    buffers: list[np.dtype]
    scalars: list[np.dtype]
    passes: list[Pass]
    row_stores: list[RowStore] = field(default_factory=list)
    by_rows: bool = True
