"""Fusion expressions as cube expressions: the one step from the kernel IR to the
WGSL emitter's input.

A :class:`Translation` turns the :class:`~ember.backend.kernel.exprs.Expr` trees of
one launch into :class:`~ember.backend.cube.ir.Expr` trees and collects what the
launch binds: its *operands* (each distinct ``(buffer, view)`` a load reads, in
order: ``load(j)``) and its *scalars* (each run-time scalar slot, with the compute
type it is read as: ``scalar(k)``). Constants become ``ir.const`` (exact, in the
kernel's source). Each op is the cube kernel's own op for the compute type of its
dtype, so a fused kernel computes what the chain of eager cube kernels computes,
with one difference cube's stores make explicit: a uint8 value is an ``i32`` word
reduced modulo 256 when stored, so here every uint8 result of an op is masked where
it is made.
"""

from __future__ import annotations

import numpy as np

from ember.backend.cube import ir
from ember.backend.fusion.wgsl.support import ctype
from ember.backend.kernel.exprs import Expr
from ember.backend.kernel.views import View
from ember.backend.ops import BinaryOp

_U8 = np.dtype(np.uint8)
_BYTE = ir.const(255, "i32")


class Translation:
    """The cube expressions of one launch, with its operands and scalars."""

    def __init__(self) -> None:
        self.operands: list[tuple[int, View]] = []  # load(j) -> (buffer, view)
        self.scalars: list[tuple[int, str]] = []  # scalar(k) -> (slot, compute type)
        self._operand_index: dict[tuple[int, View], int] = {}
        self._scalar_index: dict[tuple[int, str], int] = {}
        self._memo: dict[int, ir.Expr] = {}

    def operand(self, buffer: int, view: View) -> int:
        key = (buffer, view)
        j = self._operand_index.get(key)
        if j is None:
            j = self._operand_index[key] = len(self.operands)
            self.operands.append(key)
        return j

    def scalar(self, slot: int, ct: str) -> int:
        key = (slot, ct)
        k = self._scalar_index.get(key)
        if k is None:
            k = self._scalar_index[key] = len(self.scalars)
            self.scalars.append(key)
        return k

    def __call__(self, expr: Expr) -> ir.Expr:
        """``expr`` as a cube expression (subexpressions translated once)."""
        for e in expr.walk():
            if id(e) not in self._memo:
                self._memo[id(e)] = self._node(e)
        return self._memo[id(expr)]

    def _node(self, e: Expr) -> ir.Expr:
        ct = ctype(e.dtype)
        kind = e.kind
        if kind == "load":
            return ir.load(self.operand(e.op, e.args[0]), ct)
        if kind == "const":
            return ir.const(e.op, ct)
        if kind == "scalar":
            return ir.scalar(self.scalar(e.op, ct), ct)
        if kind == "acc":
            return self._wrap(ir.acc(e.op[1], ct), e.dtype)  # op: (kernel, reduction index)
        args = [self._memo[id(a)] if type(a) is Expr else a for a in e.args]
        if kind == "unary":
            out = ir.unary(e.op, args[0])
        elif kind == "binary":
            out = ir.binary(e.op, args[0], args[1])
        elif kind == "where":
            out = ir.select(args[0], args[1], args[2])
        elif kind == "clamp":
            out = args[0]
            if args[1] is not None:
                out = ir.binary(BinaryOp.MAXIMUM, out, args[1])
            if args[2] is not None:
                out = ir.binary(BinaryOp.MINIMUM, out, args[2])
        elif kind == "cast":
            out = ir.convert(args[0], ct)
        else:  # pragma: no cover - the scheduler makes no other kind
            raise ValueError(f"ember: fusion: no WGSL for expression kind {kind!r}")
        return self._wrap(out, e.dtype)

    @staticmethod
    def _wrap(value: ir.Expr, dtype: np.dtype) -> ir.Expr:
        """A uint8 result reduced modulo 256, as cube's uint8 store does."""
        if dtype == _U8:
            return ir.binary(BinaryOp.BITWISE_AND, value, _BYTE)
        return value
