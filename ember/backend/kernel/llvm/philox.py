"""Random draws inside compiled code: one element of a Philox4x32-10 draw as LLVM IR.

:mod:`ember.backend.philox` defines the stream (element ``i`` of a float32 draw is lane
``i % 4`` of block ``counter + i // 4``; a float64 value takes the lane pair
``2 * (i % 2)``, ``2 * (i % 2) + 1`` of block ``counter + i // 2``) and the mappings
from words to floats. This emits the same integer and IEEE steps (``*`` and ``+``
rounded one at a time, never fused), so an element computed here equals flex's
(numpy's) draw bit for bit. Flash attention draws its dropout mask this way, inside
the loops over a score block (:mod:`ember.backend.fusion.llvm.flash`), so the ``[L, S]``
mask is never stored; a draw a plan stores is written by the shared fill instead
(:mod:`ember.backend.kernel.llvm.philox_fill`, built on :func:`block`), one block per
four values.

Each element computes its whole block (ten rounds of two 32x32->64-bit products):
branch-free integer arithmetic that the loop vectoriser widens. The uniform and
bernoulli distributions compile; ``normal`` (Box-Muller over two lanes) does not yet.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from ember.backend import philox
from ember.backend.kernel.llvm.mathlib import F32, F64, I32, I64, reg_type

#: The distributions :func:`element` computes (``Distribution.kind``).
KINDS = frozenset({"uniform", "bernoulli"})
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
#: The value dtypes :func:`element` computes (flex draws others as float32 and casts).
DTYPES = frozenset({_F32, _F64})
_LO32 = (1 << 32) - 1


def block(b: ir.IRBuilder, counter: ir.Value, key_lo: ir.Value, key_hi: ir.Value) -> list[ir.Value]:
    """The four words of block ``counter`` (an ``i64``) under the key's halves: Philox4x32-10
    of ``(lo32(counter), hi32(counter), 0, 0)``. Words and key halves are ``i64`` values
    below ``2**32``: each 32x32->64-bit product is one ``i64`` multiply (``vpmuludq``), and
    the words never change width between rounds."""
    low = ir.Constant(I64, _LO32)
    thirty_two = ir.Constant(I64, 32)
    c0 = b.and_(counter, low)
    c1 = b.lshr(counter, thirty_two)
    c2 = c3 = ir.Constant(I64, 0)
    k0, k1 = key_lo, key_hi
    m0, m1 = ir.Constant(I64, philox.M0), ir.Constant(I64, philox.M1)
    w0, w1 = ir.Constant(I64, philox.W0), ir.Constant(I64, philox.W1)
    for r in range(philox.ROUNDS):
        p0 = b.mul(c0, m0)
        p1 = b.mul(c2, m1)
        c0, c1, c2, c3 = (
            b.xor(b.xor(b.lshr(p1, thirty_two), c1), k0),
            b.and_(p1, low),
            b.xor(b.xor(b.lshr(p0, thirty_two), c3), k1),
            b.and_(p0, low),
        )
        if r + 1 < philox.ROUNDS:
            k0, k1 = b.and_(b.add(k0, w0), low), b.and_(b.add(k1, w1), low)
    return [c0, c1, c2, c3]


def _lane(b: ir.IRBuilder, words: list[ir.Value], lane: ir.Value) -> ir.Value:
    """``words[lane]`` for an ``i64`` lane in ``0..3``, by selects (vectorisable)."""
    low = b.select(b.icmp_unsigned("==", b.and_(lane, ir.Constant(I64, 1)), ir.Constant(I64, 0)), words[0], words[1])
    high = b.select(b.icmp_unsigned("==", b.and_(lane, ir.Constant(I64, 1)), ir.Constant(I64, 0)), words[2], words[3])
    return b.select(b.icmp_unsigned("<", lane, ir.Constant(I64, 2)), low, high)


def element(
    b: ir.IRBuilder,
    op: tuple[str, float, float],
    dtype: np.dtype,
    index: ir.Value,
    key: tuple[ir.Value, ir.Value],
    counter: tuple[ir.Value, ir.Value],
) -> ir.Value:
    """Element ``index`` (an ``i64``) of the draw ``op`` (``(kind, a, b)`` of its
    :class:`~ember.backend.distribution.Distribution`) of ``dtype``
    at the key and first counter given as their ``(low, high)`` 32-bit halves (``i64``
    values below ``2**32``)."""
    kind, a, c = op
    key_lo, key_hi = (b.and_(k, ir.Constant(I64, _LO32)) for k in key)
    first = b.or_(b.shl(counter[1], ir.Constant(I64, 32)), b.and_(counter[0], ir.Constant(I64, _LO32)))
    if dtype == _F64:
        words = block(b, b.add(first, b.lshr(index, ir.Constant(I64, 1))), key_lo, key_hi)
        odd = b.icmp_unsigned("!=", b.and_(index, ir.Constant(I64, 1)), ir.Constant(I64, 0))
        w0 = b.trunc(b.select(odd, words[2], words[0]), I32)
        w1 = b.trunc(b.select(odd, words[3], words[1]), I32)
        high = b.uitofp(b.lshr(w0, ir.Constant(I32, 5)), F64)
        low = b.uitofp(b.lshr(w1, ir.Constant(I32, 6)), F64)
        u = b.fmul(b.fadd(b.fmul(high, ir.Constant(F64, 2.0**26)), low), ir.Constant(F64, 2.0**-53))
        if kind == "bernoulli":
            return b.uitofp(b.fcmp_ordered("<", u, ir.Constant(F64, a)), F64)
        v = b.fadd(b.fmul(u, ir.Constant(F64, c - a)), ir.Constant(F64, a))
        if c > a:
            cap = ir.Constant(F64, float(np.nextafter(c, -np.inf)))
            v = b.select(b.fcmp_ordered("<", v, cap), v, cap)
        return v
    assert dtype == _F32, f"a draw of {dtype} is not compiled"
    words = block(b, b.add(first, b.lshr(index, ir.Constant(I64, 2))), key_lo, key_hi)
    w = b.trunc(_lane(b, words, b.and_(index, ir.Constant(I64, 3))), I32)
    u = b.fmul(b.uitofp(b.lshr(w, ir.Constant(I32, 8)), F32), ir.Constant(F32, 2.0**-24))
    if kind == "bernoulli":
        return b.uitofp(b.fcmp_ordered("<", u, ir.Constant(F32, float(np.float32(a)))), reg_type(dtype))
    if (a, c) == (0.0, 1.0):  # lo + u * 1, capped, is u itself (as flex skips it)
        return u
    lo, scale, cap = (ir.Constant(F32, float(v)) for v in philox.uniform_params(a, c))
    v = b.fadd(b.fmul(u, scale), lo)
    return b.select(b.fcmp_ordered("<", v, cap), v, cap)


__all__ = ["DTYPES", "KINDS", "block", "element"]
