"""Row kernels as hand-written lowerings (see :mod:`.library` for the contract):
``softmax`` and ``log_softmax`` along the last dim of a float32 value, one row at a
time while it is in cache, instead of their expansion (a max pass, an exponential
and sum pass, a scaling pass, each over the whole value).

Per row: the maximum (on integer keys, which vectorise; NaN when the row holds one),
then ``e = exp(x - max)`` stored with its float32 sum (reassociated, so it
vectorises), then ``e * (1 / sum)`` (``softmax``) or ``x - max - log(sum)``
(``log_softmax``, whose sum and log are float64: their error is the result's near 0). The exponential flushes results below the smallest normal float32
to 0: a masked attention row holds scores near -1e4, whose exponentials would
otherwise take the CPU's slow subnormal path. These are flex's own kernels
(``ember.backend.flex.native``: the same order of operations, so eager and compiled
agree to the last bit in float32 where flex's native kernels run). A row of only
``-inf`` gives NaN, as the expansion and numpy do.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir

from ember.backend.fusion.graph import Graph, Node, Ref
from ember.backend.fusion.llvm.emitter import Emitter, LibraryOp, no_scratch
from ember.backend.kernel.llvm.mathlib import F32, F64, I32, I64

_F32 = np.dtype(np.float32)
#: Longest row a row kernel takes (a longer one is left to the expansion, which
#: splits nothing either, but keeps the values this kernel would hold in cache bounded).
MAX_ROW = 1 << 16


def _rows_supports(graph: Graph, node: Node, target: Any) -> bool:
    x, dim = node.args
    if type(x) is not Ref:
        return False
    aval = graph.avals[x]
    shape = aval.shape
    if aval.dtype != _F32 or not shape or graph.avals[node.outs[0]].dtype != _F32:
        return False
    return dim % len(shape) == len(shape) - 1 and 0 < shape[-1] <= MAX_ROW


def _key(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """An int32 key ordered as the float32 ``v`` (``-inf`` < ... < ``inf`` < NaN for
    NaNs with the sign bit clear)."""
    bits = b.bitcast(v, I32)
    flip = b.and_(b.ashr(bits, ir.Constant(I32, 31)), ir.Constant(I32, 0x7FFFFFFF))
    return b.xor(bits, flip)


def _from_key(b: ir.IRBuilder, key: ir.Value) -> ir.Value:
    flip = b.and_(b.ashr(key, ir.Constant(I32, 31)), ir.Constant(I32, 0x7FFFFFFF))
    return b.bitcast(b.xor(key, flip), F32)


def _rows(e: Emitter, log: bool) -> None:
    x_ref = e.node.args[0]
    shape = e.shape(x_ref)
    cols = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    if rows == 0:
        return
    b = e.b
    math = e.module.math
    x, out = e.args[x_ref], e.outs[0]

    def row(r: ir.Value, _: list) -> list:
        base = b.mul(r, ir.Constant(I64, cols))

        def load(j: ir.Value) -> ir.Value:
            return e.load(x, b.add(base, j), _F32)

        def peak_step(j: ir.Value, carried: list) -> list:
            key = _key(b, load(j))
            return [b.select(b.icmp_signed(">", key, carried[0]), key, carried[0])]

        (key,) = e.loops.run(cols, peak_step, [ir.Constant(I32, -0x80000000)])
        peak = _from_key(b, key)

        def expo(j: ir.Value, carried: list) -> list:
            value = math.exp_f32_flushed(b, b.fsub(load(j), peak))
            if log:  # the sum in float64: its log is the result's error near 0
                return [b.fadd(carried[0], b.fpext(value, F64), flags=("reassoc",))]
            e.store(value, out, b.add(base, j), _F32)
            return [b.fadd(carried[0], value, flags=("reassoc",))]

        (total,) = e.loops.run(cols, expo, [ir.Constant(F64 if log else F32, 0.0)])
        if log:
            log_total = b.fptrunc(math.intr(b, "llvm.log", total), F32)

            def subtract(j: ir.Value, _: list) -> list:
                e.store(b.fsub(b.fsub(load(j), peak), log_total), out, b.add(base, j), _F32)
                return []

            e.loops.run(cols, subtract)
        else:
            inv = b.fdiv(ir.Constant(F32, 1.0), total)

            def scale(j: ir.Value, _: list) -> list:
                at = b.add(base, j)
                e.store(b.fmul(e.load(out, at, _F32), inv), out, at, _F32)
                return []

            e.loops.run(cols, scale)
        return []

    e.loops.run(rows, row)


def _softmax(e: Emitter) -> None:
    _rows(e, log=False)


def _log_softmax(e: Emitter) -> None:
    _rows(e, log=True)


#: op -> its lowering.
ROW_OPS: dict[str, LibraryOp] = {
    "softmax": LibraryOp(_rows_supports, no_scratch, _softmax),
    "log_softmax": LibraryOp(_rows_supports, no_scratch, _log_softmax),
}

__all__ = ["MAX_ROW", "ROW_OPS"]
