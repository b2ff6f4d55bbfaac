"""flex's native row kernels as kernel-IR row programs
(:class:`~ember.backend.kernel.steps.RowProgram`): exact GELU and its gradient, the
ReLU gradient, row softmax, layer norm and its gradient. :mod:`ember.backend.flex.native` compiles them
(with the LSTM cell's, :mod:`ember.backend.flex.native_rnn`) through the kernel
layer's LLVM printer; the formulas match flex's numpy versions of the same kernels.
"""

from __future__ import annotations

import math

from ember.backend.kernel.op_table import KernelFn
from ember.backend.kernel.row_exprs import DENSE, F32, I32, PER_COLUMN, PER_ROW, RowExprs
from ember.backend.kernel.steps import Pass, Reduction, RowProgram, RowStore
from ember.backend.ops import BinaryOp, ReduceOp, UnaryOp

_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_FLAT = PER_COLUMN  # a flat program's element c


def gelu() -> RowProgram:
    """``ember_gelu(x, out, n)``: ``relu(x) - |x| Q(|x|)``."""
    x = RowExprs()
    v = x.read(0, PER_COLUMN)
    z = x.un(UnaryOp.ABS, v)
    positive = x.where(x.bin(BinaryOp.GT, v, x.c(0.0)), v, x.c(0.0))
    q = x.un(KernelFn.NORMAL_TAIL, z)
    out = x.sub(positive, x.mul(z, q))
    step = Pass(stores=[RowStore(1, _FLAT, out)], order=[v, z, q])  # the hand-written kernel's order
    return RowProgram("ember_gelu", [F32, F32], [], [step], by_rows=False)


def gelu_backward() -> RowProgram:
    """``ember_gelu_backward(x, g, out, n)``: ``g (Phi(x) + x phi(x))``."""
    x = RowExprs()
    v = x.read(0, PER_COLUMN)
    z = x.un(UnaryOp.ABS, v)
    q = x.un(KernelFn.NORMAL_TAIL, z)
    density = x.un(KernelFn.EXP_FLUSHED, x.mul(x.mul(z, z), x.c(-0.5)))  # exp(-x^2 / 2), as Q computes it
    below = x.un(UnaryOp.LOGICAL_NOT, x.bin(BinaryOp.GE, v, x.c(0.0)))  # v < 0 or NaN
    cdf = x.where(below, q, x.sub(x.c(1.0), q))
    slope = x.add(cdf, x.mul(x.mul(v, density), x.c(_INV_SQRT_2PI)))
    out = x.mul(slope, x.read(1, PER_COLUMN))
    step = Pass(stores=[RowStore(2, _FLAT, out)], order=[v, z, q, density])  # the hand-written kernel's order
    return RowProgram("ember_gelu_backward", [F32, F32, F32], [], [step], by_rows=False)


def relu_backward() -> RowProgram:
    """``ember_relu_backward(out, g, result, n)``: ``g`` where ``out > 0``, else 0 (the
    composite's comparison and select, in one pass)."""
    x = RowExprs()
    positive = x.bin(BinaryOp.GT, x.read(0, PER_COLUMN), x.c(0.0))
    result = x.where(positive, x.read(1, PER_COLUMN), x.c(0.0))
    return RowProgram(
        "ember_relu_backward", [F32, F32, F32], [], [Pass(stores=[RowStore(2, _FLAT, result)])], by_rows=False
    )


def softmax_rows() -> RowProgram:
    """``ember_softmax_rows(x, out, rows, cols, empty_zero)``: ``out = exp(x - max) /
    sum`` per row; a row of only ``-inf`` gives zeros when ``empty_zero`` (attention)
    and NaN otherwise (as numpy)."""
    x = RowExprs()
    value = x.read(0)
    peak = x.acc(0, 0)
    no_peak = x.bin(BinaryOp.EQ, peak, x.c(-math.inf))
    shift = x.where(no_peak, x.c(0.0), peak)
    e = x.un(KernelFn.EXP_FLUSHED, x.sub(value, shift))
    empty = x.bin(BinaryOp.LOGICAL_AND, no_peak, x.bin(BinaryOp.NE, x.scalar(0, I32), x.c(0, I32)))
    inv = x.where(empty, x.c(0.0), x.div(x.c(1.0), x.acc(1, 0)))
    passes = [
        Pass(reductions=[Reduction(ReduceOp.MAX, value, F32, 0)]),
        Pass(reductions=[Reduction(ReduceOp.SUM, e, F32, 0)], stores=[RowStore(1, DENSE, e)]),
        Pass(stores=[RowStore(1, DENSE, x.mul(x.read(1), inv))]),
    ]
    return RowProgram("ember_softmax_rows", [F32, F32], [I32], passes)


def layer_norm() -> RowProgram:
    """``ember_layer_norm(x, gamma, beta, out, mean, rstd, rows, cols, eps)``."""
    x = RowExprs()
    value = x.read(0)
    d = x.cast(x.size(1), F32)
    mean = x.div(x.acc(0, 0), d)
    centered = x.sub(value, mean)
    rstd = x.div(x.c(1.0), x.un(UnaryOp.SQRT, x.add(x.div(x.acc(1, 0), d), x.scalar(0, F32))))
    normed = x.add(x.mul(x.mul(centered, rstd), x.read(1, PER_COLUMN)), x.read(2, PER_COLUMN))
    passes = [
        Pass(reductions=[Reduction(ReduceOp.SUM, value, F32, 0)]),
        Pass(reductions=[Reduction(ReduceOp.SUM, x.mul(centered, centered), F32, 0)]),
        Pass(stores=[RowStore(3, DENSE, normed)]),
    ]
    row_stores = [RowStore(4, PER_ROW, mean), RowStore(5, PER_ROW, rstd)]
    return RowProgram("ember_layer_norm", [F32] * 6, [F32], passes, row_stores)


def layer_norm_backward() -> RowProgram:
    """``ember_layer_norm_backward(x, gamma, mean, rstd, g, dx, dgamma, dbeta, rows,
    cols, need)``: ``dx = rstd (h - mean(h) - xhat mean(h xhat))`` with ``h = g gamma``,
    and the sums over rows ``dgamma += g xhat``, ``dbeta += g`` (zeroed by the caller);
    ``need`` bit 0: dx, bit 1: dgamma and dbeta."""
    x = RowExprs()
    mean, rstd = x.read(2, PER_ROW), x.read(3, PER_ROW)
    g = x.read(4)
    xhat = x.mul(x.sub(x.read(0), mean), rstd)
    h = x.mul(g, x.read(1, PER_COLUMN))
    d = x.cast(x.size(1), F32)
    a, b = x.div(x.acc(0, 0), d), x.div(x.acc(0, 1), d)
    need = x.scalar(0, I32)

    def wants(bit: int):
        return x.bin(BinaryOp.NE, x.bin(BinaryOp.BITWISE_AND, need, x.c(bit, I32)), x.c(0, I32))

    dx = x.mul(x.sub(x.sub(h, a), x.mul(xhat, b)), rstd)
    dgamma = x.add(x.read(6, PER_COLUMN), x.mul(g, xhat))
    dbeta = x.add(x.read(7, PER_COLUMN), g)
    passes = [
        Pass(reductions=[Reduction(ReduceOp.SUM, h, F32, 0), Reduction(ReduceOp.SUM, x.mul(h, xhat), F32, 0)]),
        Pass(stores=[RowStore(5, DENSE, dx)], when=wants(1)),
        Pass(stores=[RowStore(6, PER_COLUMN, dgamma), RowStore(7, PER_COLUMN, dbeta)], when=wants(2)),
    ]
    return RowProgram("ember_layer_norm_backward", [F32] * 8, [I32], passes)


def programs() -> list[RowProgram]:
    """Every row kernel of this module, in :class:`~ember.backend.flex.native.Kernels` order."""
    return [gelu(), gelu_backward(), relu_backward(), softmax_rows(), layer_norm(), layer_norm_backward()]
