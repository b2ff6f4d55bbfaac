"""flex's unmasked float32 LSTM sequence as one native call per direction: the loop over
steps in compiled code, per step one inline matrix product
(:mod:`ember.backend.kernel.llvm.small_gemm`) and one call of flex's native cell
(:mod:`ember.backend.flex.native_rnn`, by address), so eager runs no Python per step.

Forward, step ``t`` in run order: ``z[t] = proj[t] + h @ w_hh`` (``h`` is ``h0``, then
the previous step's ``y``), then the cell writes ``h'`` into ``y[t]`` and ``c'`` into
the next step's ``c_in`` slot (``c_n`` after the last step). Backward, the steps
reversed: the cell's backward (with ``grad_y[t]`` added to ``dh`` first where given)
writes ``dZ[t]`` and the incoming ``dc``, then ``dh = dZ[t] w_hh^T``.

Each ``(batch, n, reverse, with grad_y)`` compiles once per process (and once per
machine: the object cache keeps the code; the IR bakes in no address, the cell's
entry point is an argument). ``None`` where the kernels cannot be built, where the
product's inline form does not apply, or under ``EMBER_GEMM=blas`` (then the caller
runs its per-step loop).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ember.backend.flex import native
from ember.backend.flex.native_pool import cached, compile_entry

_I64 = np.dtype(np.int64)


def _lanes() -> int:
    from ember.backend.kernel.llvm import jit, small_gemm

    return small_gemm.lanes(jit.vector_width())


def _applies(batch: int, n: int) -> bool:
    from ember.backend.kernel.llvm import small_gemm

    lanes = _lanes()
    return small_gemm.enabled() and small_gemm.applies(4 * n, lanes) and small_gemm.applies(n, lanes) and batch > 0


def _emit_loop(parts: Any, forward: bool, batch: int, n: int, reverse: bool, with_grad_y: bool) -> None:
    """The body of ``void f(table, _, _)``: ``table`` holds the steps, the cell's entry
    point and the arrays' addresses (see :func:`lstm_forward` and :func:`lstm_backward`)."""
    from llvmlite import ir

    from ember.backend.kernel.llvm import small_gemm
    from ember.backend.kernel.llvm.mathlib import I64
    from ember.backend.kernel.llvm.small_gemm import Operand

    e, (table, _, _) = parts
    b = e.b
    ptr = ir.PointerType()
    width, state = 4 * n, batch * n
    lanes = _lanes()

    def slot(i: int) -> ir.Value:
        return b.load(b.gep(table, [ir.Constant(I64, i)], source_etype=I64), typ=I64)

    def pointer(i: int) -> ir.Value:
        return b.inttoptr(slot(i), ptr)

    def c(v: int) -> ir.Constant:
        return ir.Constant(I64, v)

    steps = slot(0)
    last = b.sub(steps, c(1))

    def time_of(k: ir.Value) -> ir.Value:
        return b.sub(last, k) if reverse else k

    def f32(p: ir.Value, index: ir.Value) -> ir.Value:
        return b.gep(p, [index], source_etype=ir.FloatType())

    size = ir.Constant(I64, batch), ir.Constant(I64, n)
    if forward:
        proj, w_hh, z, y, c_in, c_n, h0 = (pointer(i) for i in range(2, 9))
        cell_fn = b.inttoptr(slot(1), ir.PointerType(ir.FunctionType(ir.VoidType(), [ptr] * 4 + [I64, I64])))

        def step(k: ir.Value, carry: list) -> list:
            t = time_of(k)
            h = carry[0]
            z_t, proj_t = f32(z, b.mul(t, c(batch * width))), f32(proj, b.mul(t, c(batch * width)))
            small_gemm.emit_gemm(
                e,
                batch,
                width,
                n,
                Operand(h, n),
                Operand(w_hh, width),
                Operand(z_t, width),
                lanes,
                Operand(proj_t, width),
            )
            is_last = b.icmp_signed("==", k, last)
            nxt = time_of(b.add(k, c(1)))
            c_next = b.select(is_last, c_n, f32(c_in, b.mul(b.select(is_last, t, nxt), c(state))))
            y_t = f32(y, b.mul(t, c(state)))
            b.call(cell_fn, [z_t, f32(c_in, b.mul(t, c(state))), y_t, c_next, *size])
            return [y_t]

        e.loops.count(steps, step, [h0])
        return
    w_t, z, c_in, c_n, d_z, dh, dc, dc_other, grad_y, to_h = (pointer(i) for i in range(2, 12))
    cell_fn = b.inttoptr(slot(1), ir.PointerType(ir.FunctionType(ir.VoidType(), [ptr] * 7 + [I64, I64])))

    def back(q: ir.Value, carry: list) -> list:
        k = b.sub(last, q)
        t = time_of(k)
        dc_now, dc_next = carry
        is_last = b.icmp_signed("==", k, last)
        nxt = time_of(b.add(k, c(1)))
        c_after = b.select(is_last, c_n, f32(c_in, b.mul(b.select(is_last, t, nxt), c(state))))
        gh = dh
        if with_grad_y:
            gy_t = f32(grad_y, b.mul(t, c(state)))
            e.span(
                0,
                state,
                lambda i: b.store(
                    b.fadd(b.load(f32(dh, i), typ=ir.FloatType()), b.load(f32(gy_t, i), typ=ir.FloatType())),
                    f32(to_h, i),
                ),
            )
            gh = to_h
        dz_t = f32(d_z, b.mul(t, c(batch * width)))
        b.call(
            cell_fn,
            [
                f32(z, b.mul(t, c(batch * width))),
                f32(c_in, b.mul(t, c(state))),
                c_after,
                gh,
                dc_now,
                dz_t,
                dc_next,
                *size,
            ],
        )
        small_gemm.emit_gemm(e, batch, n, width, Operand(dz_t, width), Operand(w_t, n), Operand(dh, n), lanes)
        return [dc_next, dc_now]

    e.loops.count(steps, back, [dc, dc_other])


def _entry(forward: bool, batch: int, n: int, reverse: bool, with_grad_y: bool) -> Any:
    key = ("lstm_sequence", forward, batch, n, reverse, with_grad_y)
    name = f"ember_lstm_{'forward' if forward else 'backward'}_{batch}_{n}_{int(reverse)}_{int(with_grad_y)}"
    return cached(
        key,
        lambda: compile_entry(
            lambda parts: _emit_loop(parts, forward, batch, n, reverse, with_grad_y), name, recipe=key
        ),
    )


def _call(found: Any, values: list[int]) -> None:
    table = np.array(values, _I64)
    found[1](native.address(table), 0, 0)


def _fn_address(fn: Any) -> int:
    return ctypes.cast(fn, ctypes.c_void_p).value or 0


def lstm_forward(kernels: Any, proj, w_hh, h0, c0, reverse: bool):
    """``(y, h_n, c_n, h_in, c_in, z)`` of ``Backend.lstm_sequence`` (float32, C-contiguous
    ``proj`` and ``h0``, unmasked), or ``None`` where the native loop does not apply."""
    steps, batch, width = proj.shape
    n = width // 4
    if not _applies(batch, n):
        return None
    found = _entry(True, batch, n, reverse, False)
    if found is None:
        return None
    w_hh = np.ascontiguousarray(w_hh)
    z = np.empty_like(proj)
    y = np.empty((steps, batch, n), proj.dtype)
    h_in, c_in, c_n = np.empty_like(y), np.empty_like(y), np.empty((batch, n), proj.dtype)
    first, last = (steps - 1, 0) if reverse else (0, steps - 1)
    c_in[first] = c0
    arrays = (proj, w_hh, z, y, c_in, c_n, h0)
    _call(found, [steps, _fn_address(kernels.lstm_cell), *(native.address(a) for a in arrays)])
    h_in[first] = h0
    if steps > 1:
        if reverse:
            h_in[:-1] = y[1:]
        else:
            h_in[1:] = y[:-1]
    return y, y[last].copy(), c_n, h_in, c_in, z


def lstm_backward(kernels: Any, w_hh, reverse: bool, c_in, c_n, z, grad_y, dh, dc):
    """``(d_z, dh, dc)`` of the unmasked float32 backward (``dh``/``dc``: fresh
    C-contiguous arrays the loop overwrites), or ``None`` where the native loop does not
    apply."""
    steps, batch, n = c_in.shape
    if not _applies(batch, n):
        return None
    found = _entry(False, batch, n, reverse, grad_y is not None)
    if found is None:
        return None
    w_t = np.ascontiguousarray(w_hh.T)
    d_z = np.empty_like(z)
    dc_other, to_h = np.empty_like(dc), np.empty_like(dh)
    gy = np.ascontiguousarray(grad_y, dtype=z.dtype) if grad_y is not None else to_h
    arrays = (w_t, z, c_in, c_n, d_z, dh, dc, dc_other, gy, to_h)
    _call(found, [steps, _fn_address(kernels.lstm_cell_backward), *(native.address(a) for a in arrays)])
    return d_z, dh, dc if steps % 2 == 0 else dc_other
