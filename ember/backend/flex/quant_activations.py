"""The activation side of flex's dynamic int8 GEMM, compiled with the GEMMs of
:mod:`ember.backend.flex.quant_kernels`: ``ember_quantize_rows_i8`` quantizes each row
of ``x`` to int8 and sums it, in two passes over the row (the row's ``max |x|``, then
the quantized values and their sum), where numpy took six over the whole input.

The result is :func:`ember.backend.flex.quantized.quantize_rows_int8`'s bit for bit:
the scale is ``max |x| / 127`` (at least ``1e-30``), or the calibrated scale, and each
value is ``clip(rint(x / scale), -127, 127)``, a true division rounded half to even.
"""

from __future__ import annotations

from typing import Any

__all__ = ["QUANTIZE_ROWS", "emit_quantize_rows"]

QUANTIZE_ROWS = "ember_quantize_rows_i8"
#: Independent ``max |x|`` chains over a row (one chain waits on ``vmaxps``'s latency).
_CHAINS = 4


def emit_quantize_rows(e: Any) -> None:
    """``ember_quantize_rows_i8(x, xq, sx, xsum, M, K, static)``: rows of float32 ``x``
    ``[M, K]`` (K a multiple of 16) to int8 ``xq``, their scales ``sx`` and the int32 sums
    of the quantized rows ``xsum``; ``static > 0`` is the calibrated scale of every row."""
    ir, p = e.ir, e.ptr
    fn, b = e.function(QUANTIZE_ROWS, [p, p, p, p, e.i64, e.i64, e.f32])
    x, xq, sx, xsum, m_count, k_count, static = fn.args
    steps = b.sdiv(k_count, e.k64(16))
    f32 = e.f32
    v16i32 = e.v16i32

    def row(b: Any, m: Any) -> None:
        base = b.mul(m, k_count)

        def at(j: Any) -> Any:
            return b.add(base, b.mul(j, e.k64(16)))

        def larger(b: Any, acc: Any, j: Any) -> Any:
            v = e.call(b, "llvm.fabs.v16f32", e.v16f, [e.vload(b, e.v16f, x, at(j), f32)])
            return e.call(b, "llvm.maximum.v16f32", e.v16f, [acc, v])

        def amax4(b: Any, j: Any, *accs: Any) -> list[Any]:
            return [larger(b, acc, b.add(b.mul(j, e.k64(_CHAINS)), e.k64(i))) for i, acc in enumerate(accs)]

        zero = ir.Constant(e.v16f, [0.0] * 16)
        tops = e.loop(b, b.sdiv(steps, e.k64(_CHAINS)), amax4, [(e.v16f, zero)] * _CHAINS)
        done = b.mul(b.sdiv(steps, e.k64(_CHAINS)), e.k64(_CHAINS))
        (top,) = e.loop(b, b.sub(steps, done), lambda b, j, acc: [larger(b, acc, b.add(done, j))], [(e.v16f, zero)])
        for other in tops:  # maximum is exact: any order of the chains gives the same value
            top = e.call(b, "llvm.maximum.v16f32", e.v16f, [top, other])
        largest = e.call(b, "llvm.vector.reduce.fmaximum.v16f32", f32, [top])  # NaN in, NaN scale out
        dynamic = e.call(
            b, "llvm.maximum.f32", f32, [b.fdiv(largest, ir.Constant(f32, 127.0)), ir.Constant(f32, 1e-30)]
        )
        scale = b.select(b.fcmp_ordered(">", static, ir.Constant(f32, 0.0)), static, dynamic)
        sv = e.splat(b, scale, e.v16f)
        lo, hi = ir.Constant(e.v16f, [-127.0] * 16), ir.Constant(e.v16f, [127.0] * 16)

        def quantize(b: Any, j: Any, total: Any) -> list[Any]:
            v = b.fdiv(e.vload(b, e.v16f, x, at(j), f32), sv)
            r = e.call(b, "llvm.roundeven.v16f32", e.v16f, [v])
            r = e.call(b, "llvm.minnum.v16f32", e.v16f, [e.call(b, "llvm.maxnum.v16f32", e.v16f, [r, lo]), hi])
            q = b.fptosi(r, v16i32)
            b.store(b.trunc(q, e.v16i8), b.gep(xq, [at(j)], source_etype=e.i8), align=1)
            return [b.add(total, q)]

        (total,) = e.loop(b, steps, quantize, [(v16i32, ir.Constant(v16i32, [0] * 16))])
        e.store(b, scale, sx, m)
        summed = e.call(b, "llvm.vector.reduce.add.v16i32", e.i32, [total])
        b.store(summed, b.gep(xsum, [m], source_etype=e.i32), align=4)

    e.loop(b, m_count, row)
    b.ret_void()
