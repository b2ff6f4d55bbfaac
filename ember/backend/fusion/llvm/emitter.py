"""What a hand-written lowering (:class:`~ember.backend.fusion.steps.Library` step) is
and emits with: :class:`LibraryOp` (whether it applies to a node, its scratch, its
IR) and :class:`Emitter` (the builder, loops, the module's BLAS and math, the step's
pointers). The lowerings themselves: :mod:`.library` (gather, scatter, pooling and
the registry), :mod:`.conv` (convolutions), :mod:`.rows` (row kernels: softmax).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from ember.backend.flex import blas as blas_mod
from ember.backend.fusion.graph import Graph, Node
from ember.backend.fusion.scalars import SymScalar
from ember.backend.kernel.llvm.builder import KernelBuilder
from ember.backend.kernel.llvm.mathlib import F64, I64, const, reg_type
from ember.backend.kernel.views import View

FLOATS = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
INDEX = np.dtype(np.int64)


@dataclass(frozen=True)
class LibraryOp:
    """A hand-written lowering: whether it applies to a node, the scratch it needs
    (named regions: name -> byte offset, and ``"size"``; each region reaches the
    code as its own ``noalias`` pointer), the IR it emits, and whether it checks
    indices (then the step may stop the run: see the module docstring). ``views``:
    the positions of the node's arguments the step reads through their views
    (:attr:`Emitter.views`: strided, 0 where they broadcast) instead of dense copies."""

    supports: Callable[[Graph, Node, Any], bool]
    scratch: Callable[[Graph, Node], dict[str, int]]
    emit: Callable[..., None]
    checks: bool = False
    views: frozenset[int] = frozenset()


class Emitter(KernelBuilder):
    """What a lowering emits with: the builder, loops and element access
    (:class:`KernelBuilder`), the module builder (BLAS routines, math) and the step's
    pointers."""

    def __init__(
        self,
        module: Any,
        b: ir.IRBuilder,
        graph: Graph,
        node: Node,
        args: dict[int, ir.Value],
        outs: list[ir.Value],
        regions: dict[str, ir.Value],
        status: ir.Value | None,
        code: int,
        scalars: tuple[ir.Value, dict[Any, int]] | None = None,
        views: dict[int, View] | None = None,
    ):
        super().__init__(b)
        self.module = module
        self.graph = graph
        self.node = node
        self.args = args  # value -> pointer to its first element
        self.outs = outs
        self.regions = regions  # scratch region name -> pointer
        self.status = status
        self.code = code  # what a failure records in status[0]
        self.scalars = scalars  # (the plan's scalar buffer, run-time scalar -> its slot)
        self.views = views or {}  # value -> its view, for the operands the op reads strided

    def shape(self, ref: int) -> tuple[int, ...]:
        return self.graph.avals[ref].shape

    def dtype(self, ref: int) -> np.dtype:
        return self.graph.avals[ref].dtype

    def scalar(self, value: Any, dtype: np.dtype) -> ir.Value:
        """A scalar argument of the node as a ``dtype`` register: a constant, or a
        run-time scalar read from the plan's scalar buffer (float64 there)."""
        if type(value) is not SymScalar:
            return const(dtype, float(value))
        assert self.scalars is not None, "a run-time scalar reaches a step that was not given the scalar buffer"
        buffer, slots = self.scalars
        slot = self.b.gep(buffer, [ir.Constant(I64, slots[value])], source_etype=F64)
        number = self.b.load(slot, typ=F64, align=8)
        return number if dtype == np.dtype(np.float64) else self.b.fptrunc(number, reg_type(dtype))

    def check_index(self, index: ir.Value, size: int) -> ir.Value:
        """``index`` if it lies in ``[0, size)``; otherwise records it as the step's
        failure and gives 0 (so nothing is read or written out of bounds)."""
        b = self.b
        ok = b.and_(b.icmp_signed(">=", index, ir.Constant(I64, 0)), b.icmp_signed("<", index, ir.Constant(I64, size)))
        with b.if_then(b.not_(ok), likely=False):
            first = b.load(self.status, typ=I64)
            with b.if_then(b.icmp_signed("==", first, ir.Constant(I64, 0))):
                b.store(ir.Constant(I64, self.code), self.status)
                b.store(index, b.gep(self.status, [ir.Constant(I64, 1)], source_etype=I64))
        return b.select(ok, index, ir.Constant(I64, 0))

    def gemm(
        self,
        dtype: np.dtype,
        trans_a: bool,
        trans_b: bool,
        m: int | ir.Value,
        n: int | ir.Value,
        k: int | ir.Value,
        a: ir.Value,
        lda: int,
        bm: ir.Value,
        ldb: int,
        beta: ir.Value,
        c: ir.Value,
        ldc: int,
    ) -> None:
        """``C = A @ B + beta * C`` (row-major): ``?gemm`` of the plan's BLAS, or ember's
        own float32 product (:mod:`.sgemm`) where the plan runs it, neither operand is
        transposed, the sizes are constants and ``beta`` is a constant 0 or 1. A size
        may be a run-time ``i64`` value (then the product is BLAS's)."""
        constant = isinstance(m, int) and isinstance(n, int) and isinstance(k, int)
        own = (
            constant
            and dtype == np.dtype(np.float32)
            and self.module.own_products
            and not trans_a
            and not trans_b
            and isinstance(beta, ir.Constant)
            and beta.constant in (0.0, 1.0)
        )
        if own:
            assert isinstance(m, int) and isinstance(n, int) and isinstance(k, int)
            self.module.own_sgemm(self.b, m, n, k, a, lda, bm, ldb, c, ldc, beta.constant == 1.0)
            return
        blas = self.module.blas
        nt = I64 if blas.int_bits == 64 else ir.IntType(32)
        i32 = ir.IntType(32)
        t = reg_type(dtype)

        def trans(flag: bool) -> ir.Constant:
            return ir.Constant(i32, blas_mod.TRANS if flag else blas_mod.NO_TRANS)

        def size(x: int | ir.Value) -> ir.Value:
            if isinstance(x, int):
                return ir.Constant(nt, x)
            return x if nt is I64 else self.b.trunc(x, nt)

        self.b.call(
            self.module.gemm(dtype),
            [
                ir.Constant(i32, blas_mod.ROW_MAJOR),
                trans(trans_a),
                trans(trans_b),
                size(m),
                size(n),
                size(k),
                ir.Constant(t, 1.0),
                a,
                ir.Constant(nt, lda),
                bm,
                ir.Constant(nt, ldb),
                beta,
                c,
                ir.Constant(nt, ldc),
            ],
        )


def no_scratch(graph: Graph, node: Node) -> dict[str, int]:
    return {}


__all__ = ["FLOATS", "INDEX", "Emitter", "LibraryOp", "no_scratch"]
