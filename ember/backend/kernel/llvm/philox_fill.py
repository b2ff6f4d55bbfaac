"""A Philox draw written to memory by one function per (distribution kind, dtype),
shared by flex's eager draws and compiled plans
(:class:`~ember.backend.kernel.llvm.shared.SharedKernel`).

``fill(out, n, key, counter, p0, p1, p2)`` writes values ``0 .. n - 1`` of the draw at
``(key, counter)`` (:mod:`ember.backend.philox`'s stream, bit for bit) to ``out``: each
Philox4x32-10 block is computed once for the four float32 (two float64) values it
yields, in a loop over blocks that the loop vectoriser widens. The distribution's
parameters are run-time arguments (:func:`parameters`), so one function serves every
probability and range: a dropout mask of any rate, in any process, from the object
cache.

Inlining one element of the draw per element of the loop that reads it
(:func:`ember.backend.kernel.llvm.philox.element`) computes a whole block per element,
and its vectorised rounds were the costliest function of digits' training plan to
compile (its dropout kernel: about 48 ms compiled alone); a plan calls this function
instead, which an eager run has already compiled: the plan's LLVM time 287 -> 264 ms
(CPU time, medians of 15 alternating compiles of the two plans' IR). Reading a mask
from memory instead of drawing it where it is used costs less than the three blocks
per four values it saves: W4's GPT with dropout 0.1 steps in 26.6 ms compiled against
27.8 ms (CPU time, medians of 4 alternating rounds).
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from ember.backend import philox
from ember.backend.distribution import Distribution
from ember.backend.kernel.llvm.mathlib import F32, F64, I32, I64, kernel_function
from ember.backend.kernel.llvm.philox import KINDS, block
from ember.backend.kernel.llvm.shared import SharedKernel
from ember.errors import ValueRangeError

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
#: The value dtypes a fill writes (other float widths and ints are drawn as float32).
DTYPES = frozenset({_F32, _F64})
_LO32 = (1 << 32) - 1
_PTR = ir.PointerType()
#: ``void fill(ptr out, i64 n, i64 key, i64 counter, double p0, double p1, double p2)``
SIGNATURE = ir.FunctionType(ir.VoidType(), [_PTR, I64, I64, I64, F64, F64, F64])


def parameters(kind: str, a: float, b: float, dtype: np.dtype) -> tuple[float, float, float]:
    """The fill's run-time parameters ``(p0, p1, p2)`` for the draw ``(kind, a, b)`` (a
    :class:`~ember.backend.distribution.Distribution`'s fields): bernoulli's ``p``
    (rounded to float32 for a float32 draw); uniform's ``lo``, scale and cap
    (:func:`ember.backend.philox.uniform_params` for float32; ``low``, ``high - low``
    and the largest float64 below ``high``, or infinity for an empty range, for float64)."""
    a, b = float(a), float(b)
    if kind == "bernoulli":
        return (float(np.float32(a)) if dtype == _F32 else a, 0.0, 0.0)
    if dtype == _F32:
        lo, scale, cap = philox.uniform_params(a, b)
        return float(lo), float(scale), float(cap)
    return a, b - a, float(np.nextafter(b, -np.inf)) if b > a else math.inf


def _values(
    b: ir.IRBuilder, kind: str, dtype: np.dtype, words: list[ir.Value], params: list[ir.Value]
) -> list[ir.Value]:
    """The values one block's ``words`` yield: four float32 or two float64."""
    if dtype == _F64:
        out = []
        for w0, w1 in ((words[0], words[1]), (words[2], words[3])):
            high = b.uitofp(b.lshr(b.trunc(w0, I32), ir.Constant(I32, 5)), F64)
            low = b.uitofp(b.lshr(b.trunc(w1, I32), ir.Constant(I32, 6)), F64)
            u = b.fmul(b.fadd(b.fmul(high, ir.Constant(F64, 2.0**26)), low), ir.Constant(F64, 2.0**-53))
            out.append(_map(b, kind, u, params, F64))
        return out
    p = [b.fptrunc(v, F32) for v in params]
    out = []
    for w in words:
        u = b.fmul(b.uitofp(b.lshr(b.trunc(w, I32), ir.Constant(I32, 8)), F32), ir.Constant(F32, 2.0**-24))
        out.append(_map(b, kind, u, p, F32))
    return out


def _map(b: ir.IRBuilder, kind: str, u: ir.Value, p: list[ir.Value], t: ir.Type) -> ir.Value:
    """``u < p0`` as 0/1 (bernoulli), or ``min(u * p1 + p0, p2)`` (uniform; ``*`` and
    ``+`` rounded one at a time, and a NaN kept, as numpy's ``minimum``)."""
    if kind == "bernoulli":
        return b.uitofp(b.fcmp_ordered("<", u, p[0]), t)
    v = b.fadd(b.fmul(u, p[1]), p[0])
    return b.select(b.fcmp_unordered("<", v, p[2]), v, p[2])


def fill_function(module: ir.Module, name: str, kind: str, dtype: np.dtype, vector_bits: int | None) -> ir.Function:
    """Defines ``name`` (:data:`SIGNATURE`) in ``module``: the fill of a ``kind`` draw of ``dtype``."""
    fn = kernel_function(module, name, list(SIGNATURE.args), vector_bits)
    out, n, key, counter, *params = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    low = ir.Constant(I64, _LO32)
    key_lo, key_hi = b.and_(key, low), b.lshr(key, ir.Constant(I64, 32))
    per = 2 if dtype == _F64 else 4
    t = F64 if dtype == _F64 else F32
    shift = ir.Constant(I64, per.bit_length() - 1)
    blocks = b.lshr(n, shift)

    def store(value: ir.Value, index: ir.Value) -> None:
        b.store(value, b.gep(out, [index], source_etype=t), align=dtype.itemsize)

    def body(j: ir.Value, _: list) -> list:
        values = _values(b, kind, dtype, block(b, b.add(counter, j), key_lo, key_hi), params)
        first = b.shl(j, shift)
        for lane, value in enumerate(values):
            store(value, b.or_(first, ir.Constant(I64, lane)))
        return []

    from ember.backend.kernel.llvm.loops import Loops  # loops calls this module

    Loops(b).count(blocks, body)
    # The last block's first ``n % per`` values, where ``n`` is not a multiple of ``per``.
    first = b.shl(blocks, shift)
    rest = b.sub(n, first)
    with b.if_then(b.icmp_signed(">", rest, ir.Constant(I64, 0)), likely=False):
        values = _values(b, kind, dtype, block(b, b.add(counter, blocks), key_lo, key_hi), params)
        store(values[0], first)
        for lane in range(1, per - 1):
            with b.if_then(b.icmp_signed(">", rest, ir.Constant(I64, lane))):
                store(values[lane], b.add(first, ir.Constant(I64, lane)))
    b.ret_void()
    return fn


def fill_kernel(kind: str, dtype: np.dtype) -> SharedKernel:
    """The shared fill of a ``kind`` draw (``"uniform"`` or ``"bernoulli"``) of ``dtype``
    (float32 or float64) for the host's vector width."""
    from ember.backend.kernel.llvm import jit

    dtype = np.dtype(dtype)
    assert kind in KINDS and dtype in DTYPES, f"a fill of a {kind} draw of {dtype} is not compiled"
    width = jit.vector_width()

    def build(own: ir.Module, name: str) -> ir.Function:
        return fill_function(own, name, kind, dtype, width)

    return SharedKernel("ember_philox_fill", ("philox_fill", kind, dtype.str, width), SIGNATURE, build)


def applies(distribution: Distribution, dtype: np.dtype) -> bool:
    """Whether a fill draws ``distribution`` as ``dtype`` values (float32 only where
    its range fits: :func:`ember.backend.philox.check_float32`)."""
    if distribution.kind not in KINDS or np.dtype(dtype) not in DTYPES:
        return False
    if np.dtype(dtype) == _F32:
        try:
            philox.check_float32(distribution)
        except ValueRangeError:
            return False
    return True


__all__ = ["DTYPES", "SIGNATURE", "applies", "fill_function", "fill_kernel", "parameters"]
