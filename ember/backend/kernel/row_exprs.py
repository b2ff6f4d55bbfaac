"""Building a :class:`~ember.backend.kernel.steps.RowProgram`'s expressions by hand.

:class:`RowExprs` is the interning factory (:class:`~ember.backend.kernel.exprs.Exprs`)
with one method per leaf and node kind, typed as the printers expect (comparisons
give bool, the rest their first operand's dtype). flex's native kernels are written
with it (:mod:`ember.backend.flex.row_kernels`, :mod:`ember.backend.flex.native_rnn`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.backend.kernel.exprs import Expr, Exprs
from ember.backend.kernel.op_table import COMPARE, LOGICAL, KernelFn
from ember.backend.kernel.steps import RowView
from ember.backend.ops import BinaryOp, UnaryOp

F32 = np.dtype(np.float32)
I32 = np.dtype(np.int32)
I64 = np.dtype(np.int64)
_BOOL = np.dtype(np.bool_)

#: The common accesses of a row program (see :class:`RowView`).
DENSE = RowView(1, 0, 1)
PER_COLUMN = RowView(0, 0, 1)
PER_ROW = RowView(0, 1, 0)


class RowExprs(Exprs):
    """Expressions of row programs (see the module docstring)."""

    def read(self, buffer: int, view: RowView = DENSE, dtype: np.dtype = F32) -> Expr:
        return self.make("load", buffer, (view,), dtype)

    def c(self, value: Any, dtype: np.dtype = F32) -> Expr:
        return self.const(value, dtype)

    def scalar(self, k: int, dtype: np.dtype) -> Expr:
        """The program's ``k``-th scalar argument."""
        return self.make("scalar", k, (), dtype)

    def size(self, axis: int) -> Expr:
        """The program's rows (0) or columns (1), int64."""
        return self.make("size", axis, (), I64)

    def acc(self, step: int, k: int, dtype: np.dtype = F32) -> Expr:
        """The result of reduction ``k`` of pass ``step``."""
        return self.make("acc", (step, k), (), dtype)

    def un(self, op: UnaryOp | KernelFn, x: Expr) -> Expr:
        return self.make("unary", op, (x,), x.dtype)

    def bin(self, op: BinaryOp, x: Expr, y: Expr) -> Expr:
        dtype = _BOOL if op in COMPARE or op in LOGICAL else x.dtype
        return self.make("binary", op, (x, y), dtype)

    def where(self, cond: Expr, x: Expr, y: Expr) -> Expr:
        return self.make("where", "where", (cond, x, y), x.dtype)

    def cast(self, x: Expr, dtype: np.dtype) -> Expr:
        return self.make("cast", "cast", (x,), dtype)

    # The float arithmetic the kernels are written in.
    def add(self, x: Expr, y: Expr) -> Expr:
        return self.bin(BinaryOp.ADD, x, y)

    def sub(self, x: Expr, y: Expr) -> Expr:
        return self.bin(BinaryOp.SUB, x, y)

    def mul(self, x: Expr, y: Expr) -> Expr:
        return self.bin(BinaryOp.MUL, x, y)

    def div(self, x: Expr, y: Expr) -> Expr:
        return self.bin(BinaryOp.DIV, x, y)


__all__ = ["DENSE", "F32", "I32", "I64", "PER_COLUMN", "PER_ROW", "RowExprs"]
