"""The weight-only quantized matmul as kernel IR: ``out = x @ dequantize(w).T + bias``
reading the packed weight, dequantized in registers, for any printer (the CUDA C one
runs it on the cuda backend; the LLVM one compiles the same kernels in the tests).

The weight is ``ember.tensor.quant``'s layout: ``[N, K]`` int8 or uint8 values, or int4
packed two per byte in groups of ``g`` (byte ``j`` of a group holds value ``j`` in its
low nibble and value ``j + g/2`` in its high one), with a scale (and a uint8 zero point)
per tensor, per row, or per group of ``g`` values of a row.

Two kernels, the second only with several groups per row:

1. over ``[M, N, G, L]`` (``G = K / g`` groups; ``L = g`` values, or ``g / 2`` bytes for
   int4), the sum along ``L`` of ``x * (q - z)``: an int4 byte gives both its nibbles
   (``floor(b / 16)`` and the remainder, exact in float32), each multiplied by its own
   element of ``x``. The epilogue multiplies the group's sum by its scale once; with one
   group it also adds the bias and writes ``out``, else it writes ``partial [M, N, G]``;
2. over ``[M, N, G]``, the sum along ``G`` of ``partial``, plus the bias.

Buffers: ``X, VALUES, SCALES, ZEROS, BIAS, OUT, PARTIAL`` (:data:`BUFFERS`); every
operand is dense row-major from element 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.backend.kernel.exprs import Expr, Exprs
from ember.backend.kernel.steps import Kernel, Reduction, Store
from ember.backend.kernel.views import View
from ember.backend.ops import BinaryOp, ReduceOp, UnaryOp

__all__ = ["BUFFERS", "QuantMatmul", "quant_matmul_kernels"]

X, VALUES, SCALES, ZEROS, BIAS, OUT, PARTIAL = range(7)
BUFFERS = {"x": X, "values": VALUES, "scales": SCALES, "zeros": ZEROS, "bias": BIAS, "out": OUT, "partial": PARTIAL}
_F32 = np.dtype(np.float32)


@dataclass(frozen=True)
class QuantMatmul:
    """One product's sizes and kind: ``x [m, k] @ w.T`` with ``w [n, k]`` in groups of
    ``group``; ``value`` ``"int8"`` (``signed``: int8 values, else uint8) or ``"int4"``."""

    m: int
    n: int
    k: int
    group: int
    value: str
    signed: bool
    zero_points: bool
    bias: bool
    per_tensor: bool

    @property
    def groups(self) -> int:
        return self.k // self.group

    @property
    def values_dtype(self) -> np.dtype:
        return np.dtype(np.int8 if self.value == "int8" and self.signed else np.uint8)


def quant_matmul_kernels(p: QuantMatmul) -> list[Kernel]:
    """The kernels of the product ``p`` (see the module docstring)."""
    e = Exprs()
    m, n, k, g, groups = p.m, p.n, p.k, p.group, p.groups
    int4 = p.value == "int4"
    width = g // 2 if int4 else g  # bytes per group
    row_bytes = k // 2 if int4 else k
    space = (m, n, groups, width)

    def view(strides: tuple[int, ...]) -> View:
        return View(space, strides)

    per_group = (0, 0, 0, 0) if p.per_tensor else (0, groups, 1, 0)  # a scale or zero point per (row, group)
    scale = e.load(SCALES, view(per_group), _F32)
    if p.zero_points:
        zero = e.make("cast", None, (e.load(ZEROS, view(per_group), np.dtype(np.uint8)),), _F32)
    else:
        zero = e.const(8.0 if int4 else 0.0, _F32)
    stored = e.load(VALUES, view((0, row_bytes, width, 1)), p.values_dtype)
    q = e.make("cast", None, (stored,), _F32)
    x = e.load(X, view((k, 0, g, 1)), _F32)

    def mul(a: Expr, b: Expr) -> Expr:
        return e.make("binary", BinaryOp.MUL, (a, b), _F32)

    def sub(a: Expr, b: Expr) -> Expr:
        return e.make("binary", BinaryOp.SUB, (a, b), _F32)

    if int4:
        high = e.make("unary", UnaryOp.FLOOR, (e.make("binary", BinaryOp.DIV, (q, e.const(16.0, _F32)), _F32),), _F32)
        low = sub(q, mul(high, e.const(16.0, _F32)))
        x_high = e.load(X, View(space, (k, 0, g, 1), width), _F32)
        term = e.make("binary", BinaryOp.ADD, (mul(x, sub(low, zero)), mul(x_high, sub(high, zero))), _F32)
    else:
        term = mul(x, sub(q, zero))
    acc = e.make("acc", (0, 0), (), _F32)
    scaled = mul(acc, scale)
    one_group = groups == 1
    if one_group:
        out = _plus_bias(e, p, scaled, View(space, (0, 1, 0, 0)))
        first = Kernel(space, 3, [Reduction(ReduceOp.SUM, term, _F32, width)], [Store(OUT, out, True)])
        return [first]
    first = Kernel(space, 3, [Reduction(ReduceOp.SUM, term, _F32, width)], [Store(PARTIAL, scaled, True)])
    e2 = Exprs()
    partial = e2.load(PARTIAL, View((m, n, groups), (n * groups, groups, 1)), _F32)
    total = _plus_bias(e2, p, e2.make("acc", (0, 0), (), _F32), View((m, n, groups), (0, 1, 0)))
    second = Kernel((m, n, groups), 2, [Reduction(ReduceOp.SUM, partial, _F32, groups)], [Store(OUT, total, True)])
    return [first, second]


def _plus_bias(e: Exprs, p: QuantMatmul, value: Expr, bias: View) -> Expr:
    """``value + bias[n]`` (the bias read through ``bias``, a view over the kernel's space)."""
    if not p.bias:
        return value
    return e.make("binary", BinaryOp.ADD, (value, e.load(BIAS, bias, _F32)), _F32)
