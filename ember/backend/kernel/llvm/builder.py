"""What a hand-written loop nest emits with: :class:`KernelBuilder`, the IR builder and
its loops plus typed loads, stores, spans and fills over flat pointers. Fusion's
lowerings (:class:`ember.backend.fusion.llvm.emitter.Emitter` extends it) and flex's
per-shape kernels (:mod:`ember.backend.flex.native_pool`) share the kernels written
against it (:mod:`.pooling`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from llvmlite import ir

from ember.backend.kernel.llvm.loops import Loops
from ember.backend.kernel.llvm.mathlib import I64, mem_type


class KernelBuilder:
    """The builder ``b``, its :class:`Loops`, and element access by flat index."""

    def __init__(self, b: ir.IRBuilder):
        self.b = b
        self.loops = Loops(b)

    def at(self, ptr: ir.Value, index: ir.Value, dtype: np.dtype) -> ir.Value:
        return self.b.gep(ptr, [index], source_etype=mem_type(dtype))

    def load(self, ptr: ir.Value, index: ir.Value, dtype: np.dtype) -> ir.Value:
        return self.b.load(self.at(ptr, index, dtype), typ=mem_type(dtype), align=dtype.itemsize)

    def store(self, value: ir.Value, ptr: ir.Value, index: ir.Value, dtype: np.dtype) -> None:
        self.b.store(value, self.at(ptr, index, dtype), align=dtype.itemsize)

    def span(self, lo: int, hi: int, body: Callable[[ir.Value], None]) -> None:
        """``for i in range(lo, hi): body(i)`` (nothing when empty)."""
        if hi <= lo:
            return
        b = self.b

        def step(i: ir.Value, _: list) -> list:
            body(b.add(i, ir.Constant(I64, lo)) if lo else i)
            return []

        self.loops.run(hi - lo, step)

    def fill(self, ptr: ir.Value, start: ir.Value, count: int, value: ir.Value, dtype: np.dtype) -> None:
        """``ptr[start:start + count] = value``."""
        self.span(0, count, lambda i: self.store(value, ptr, self.b.add(start, i), dtype))

    def linear(self, indices: list[ir.Value], strides: tuple[int, ...], base: ir.Value | None = None) -> ir.Value:
        b = self.b
        total = base if base is not None else ir.Constant(I64, 0)
        for index, stride in zip(indices, strides):
            if stride:
                total = b.add(total, b.mul(index, ir.Constant(I64, stride)))
        return total


__all__ = ["KernelBuilder"]
