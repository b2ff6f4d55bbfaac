"""The exact GELU and its gradient as hand-written lowerings (see :mod:`.library` for
the contract), for float32 values: flex's native kernels (``ember.backend.flex.native``)
in compiled code, one pass each.

With ``z = |x|`` and the normal tail ``Q(z) = erfc(z / sqrt 2) / 2`` (Abramowitz &
Stegun 7.1.26, :meth:`~ember.backend.kernel.llvm.mathlib.MathLib.normal_tail_f32`):
``gelu(x) = max(x, 0) - z Q(z)`` and ``gelu'(x) = Phi(x) + x phi(x)`` with ``Phi(x) =
Q(z)`` below 0 and ``1 - Q(z)`` above. Unlike the expansion's ``x (1 + erf(x /
sqrt 2)) / 2``, whose ``1 + erf`` cancels for negative ``x``, the tail keeps its
relative accuracy there. At the infinities both give NaN (``inf * 0``), as flex
and torch do; NaN stays NaN.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from llvmlite import ir

from ember.backend.fusion.graph import Graph, Node, Ref
from ember.backend.fusion.llvm.emitter import Emitter, LibraryOp, no_scratch
from ember.backend.kernel.llvm.mathlib import F32
from ember.backend.kernel.views import size_of

_F32 = np.dtype(np.float32)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _supports(graph: Graph, node: Node, target: Any) -> bool:
    avals = graph.avals
    refs = node.args
    if any(type(r) is not Ref for r in refs):
        return False
    shape = avals[refs[0]].shape
    return all(avals[r].dtype == _F32 and avals[r].shape == shape for r in refs) and size_of(shape) > 0


def _gelu(e: Emitter) -> None:
    (x_ref,) = e.node.args
    b = e.b
    math_ = e.module.math
    zero = ir.Constant(F32, 0.0)
    x, out = e.args[x_ref], e.outs[0]

    def body(i: ir.Value) -> None:
        v = e.load(x, i, _F32)
        z = math_.intr(b, "llvm.fabs", v)
        q, _ = math_.normal_tail_f32(b, z)
        positive = b.select(b.fcmp_ordered(">", v, zero), v, zero)
        e.store(b.fsub(positive, b.fmul(z, q)), out, i, _F32)

    e.span(0, size_of(e.shape(x_ref)), body)


def _gelu_backward(e: Emitter) -> None:
    x_ref, g_ref = e.node.args
    b = e.b
    math_ = e.module.math
    zero, one = ir.Constant(F32, 0.0), ir.Constant(F32, 1.0)
    x, g, out = e.args[x_ref], e.args[g_ref], e.outs[0]

    def body(i: ir.Value) -> None:
        v = e.load(x, i, _F32)
        z = math_.intr(b, "llvm.fabs", v)
        q, density = math_.normal_tail_f32(b, z)
        cdf = b.select(b.fcmp_unordered("<", v, zero), q, b.fsub(one, q))
        slope = b.fadd(cdf, b.fmul(b.fmul(v, density), ir.Constant(F32, _INV_SQRT_2PI)))
        e.store(b.fmul(slope, e.load(g, i, _F32)), out, i, _F32)

    e.span(0, size_of(e.shape(x_ref)), body)


#: op -> its lowering.
ACTIVATION_OPS: dict[str, LibraryOp] = {
    "gelu": LibraryOp(_supports, no_scratch, _gelu),
    "gelu_backward": LibraryOp(_supports, no_scratch, _gelu_backward),
}

__all__ = ["ACTIVATION_OPS"]
