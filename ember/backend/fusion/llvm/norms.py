"""Layer norm and RMS norm, forward and backward, as hand-written lowerings (see
:mod:`.library` for the contract), for float32 values along the last dim: one pass
over the rows each, instead of the composites' expansion (two reductions and an
elementwise pass forward, four reductions and the elementwise chain rule backward,
each over the whole value).

Layer norm forward, per row of ``D`` values: the sum and ``mean = sum / D``, the sum
of squared deviations, ``rstd = 1 / sqrt(sq / D + epsilon)``, then ``(x - mean) rstd
gamma + beta`` (the product and the sum skipped where ``gamma``/``beta`` is absent);
the statistics go to the ``[..., 1]`` outputs the backward reads. Backward, per row:
``a = sum(h) / D`` and ``b = sum(h xhat) / D`` with ``h = g gamma`` and ``xhat = (x -
mean) rstd``, then ``dx = (h - a - xhat b) rstd``; ``dgamma += g xhat`` and ``dbeta +=
g`` row after row (zeroed first). RMS norm is the same without the mean: ``rstd = 1 /
sqrt(sum(x^2) / D + epsilon)``, ``out = x rstd gamma``; ``dx = (h - xhat b) rstd``
with ``xhat = x rstd``, and ``dgamma``.

Layer norm's are flex's native kernels (``ember.backend.flex.native``) in the same
order of operations; RMS norm's follow its composite's. Compiled and eager agree to
rounding (the sums are reassociated, so they vectorise). ``epsilon`` is a constant
where the plan fixed it (a captured step's literal), else read from the plan's
run-time scalars.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir

from ember.backend.fusion.graph import Graph, Node, Ref, Sc
from ember.backend.fusion.llvm.emitter import Emitter, LibraryOp, no_scratch
from ember.backend.fusion.scalars import SymScalar
from ember.backend.kernel.llvm.mathlib import F32, I64

_F32 = np.dtype(np.float32)
_REASSOC = ("reassoc",)


def _is_f32(graph: Graph, ref: Any, shape: tuple[int, ...] | None = None) -> bool:
    if type(ref) is not Ref:
        return False
    aval = graph.avals[ref]
    return aval.dtype == _F32 and (shape is None or aval.shape == shape)


def _param_ok(graph: Graph, ref: Any, d: int) -> bool:
    """An absent parameter, or float32 with ``d`` values."""
    return ref is None or (_is_f32(graph, ref) and graph.avals[ref].size == d)


def _forward_supports(graph: Graph, node: Node, target: Any) -> bool:
    x, gamma, beta, epsilon = node.args
    # Asked before expansion (a placeholder, ``Sc``) and after it (a float where the
    # scalar is fixed, a ``SymScalar`` read at run time where it is not).
    if not _is_f32(graph, x) or type(epsilon) not in (float, int, Sc, SymScalar):
        return False
    shape = graph.avals[x].shape
    if not shape or shape[-1] == 0:
        return False
    return _param_ok(graph, gamma, shape[-1]) and _param_ok(graph, beta, shape[-1])


def _backward_supports(graph: Graph, node: Node, target: Any) -> bool:
    x, gamma, mean, rstd, grad, *_ = node.args
    if not _is_f32(graph, x):
        return False
    shape = graph.avals[x].shape
    if not shape or shape[-1] == 0 or not _is_f32(graph, grad, shape):
        return False
    stats = shape[:-1] + (1,)
    return _is_f32(graph, mean, stats) and _is_f32(graph, rstd, stats) and _param_ok(graph, gamma, shape[-1])


def _geometry(e: Emitter, x_ref: Ref) -> tuple[int, int]:
    shape = e.shape(x_ref)
    return int(np.prod(shape[:-1], dtype=np.int64)), shape[-1]


def _layer_norm(e: Emitter) -> None:
    x_ref, gamma_ref, beta_ref, epsilon = e.node.args
    rows, cols = _geometry(e, x_ref)
    if rows == 0:
        return
    b = e.b
    x, gamma, beta = e.args[x_ref], e.args.get(gamma_ref), e.args.get(beta_ref)
    out, mean_out, rstd_out = e.outs
    d = ir.Constant(F32, float(cols))
    eps = e.scalar(epsilon, _F32)
    zero, one = ir.Constant(F32, 0.0), ir.Constant(F32, 1.0)

    def row(r: ir.Value, _: list) -> list:
        base = b.mul(r, ir.Constant(I64, cols))

        def load(j: ir.Value) -> ir.Value:
            return e.load(x, b.add(base, j), _F32)

        (total,) = e.loops.run(cols, lambda j, s: [b.fadd(s[0], load(j), flags=_REASSOC)], [zero])
        mean = b.fdiv(total, d)

        def square(j: ir.Value, s: list) -> list:
            centered = b.fsub(load(j), mean)
            return [b.fadd(s[0], b.fmul(centered, centered), flags=_REASSOC)]

        (sq,) = e.loops.run(cols, square, [zero])
        rstd = b.fdiv(one, e.module.math.intr(b, "llvm.sqrt", b.fadd(b.fdiv(sq, d), eps)))

        def norm(j: ir.Value, _: list) -> list:
            value = b.fmul(b.fsub(load(j), mean), rstd)
            if gamma is not None:
                value = b.fmul(value, e.load(gamma, j, _F32))
            if beta is not None:
                value = b.fadd(value, e.load(beta, j, _F32))
            e.store(value, out, b.add(base, j), _F32)
            return []

        e.loops.run(cols, norm)
        e.store(mean, mean_out, r, _F32)
        e.store(rstd, rstd_out, r, _F32)
        return []

    e.loops.run(rows, row)


def _layer_norm_backward(e: Emitter) -> None:
    x_ref, gamma_ref, mean_ref, rstd_ref, grad_ref, need_x, need_gamma, need_beta = e.node.args
    rows, cols = _geometry(e, x_ref)
    want_gamma = bool(need_gamma) and gamma_ref is not None
    outs = iter(e.outs)
    dx = next(outs) if need_x else None
    dgamma = next(outs) if want_gamma else None
    dbeta = next(outs) if need_beta else None
    b = e.b
    zero = ir.Constant(F32, 0.0)
    for total in (dgamma, dbeta):
        if total is not None:
            e.fill(total, ir.Constant(I64, 0), cols, zero, _F32)
    if rows == 0:
        return
    x, gamma, g = e.args[x_ref], e.args.get(gamma_ref), e.args[grad_ref]
    mean_in, rstd_in = e.args[mean_ref], e.args[rstd_ref]
    d = ir.Constant(F32, float(cols))

    def row(r: ir.Value, _: list) -> list:
        base = b.mul(r, ir.Constant(I64, cols))
        mean = e.load(mean_in, r, _F32)
        rstd = e.load(rstd_in, r, _F32)

        def xhat(j: ir.Value) -> ir.Value:
            return b.fmul(b.fsub(e.load(x, b.add(base, j), _F32), mean), rstd)

        def grad(j: ir.Value) -> ir.Value:
            return e.load(g, b.add(base, j), _F32)

        def h(j: ir.Value) -> ir.Value:
            return grad(j) if gamma is None else b.fmul(grad(j), e.load(gamma, j, _F32))

        if dx is not None:

            def sums(j: ir.Value, s: list) -> list:
                hj = h(j)
                return [b.fadd(s[0], hj, flags=_REASSOC), b.fadd(s[1], b.fmul(hj, xhat(j)), flags=_REASSOC)]

            sh, shx = e.loops.run(cols, sums, [zero, zero])
            a, bb = b.fdiv(sh, d), b.fdiv(shx, d)

            def grad_x(j: ir.Value, _: list) -> list:
                value = b.fmul(b.fsub(b.fsub(h(j), a), b.fmul(xhat(j), bb)), rstd)
                e.store(value, dx, b.add(base, j), _F32)
                return []

            e.loops.run(cols, grad_x)
        if dgamma is not None or dbeta is not None:

            def grad_params(j: ir.Value, _: list) -> list:
                gv = grad(j)
                if dgamma is not None:
                    e.store(b.fadd(e.load(dgamma, j, _F32), b.fmul(gv, xhat(j))), dgamma, j, _F32)
                if dbeta is not None:
                    e.store(b.fadd(e.load(dbeta, j, _F32), gv), dbeta, j, _F32)
                return []

            e.loops.run(cols, grad_params)
        return []

    e.loops.run(rows, row)


def _rms_supports(graph: Graph, node: Node, target: Any) -> bool:
    x, gamma, epsilon = node.args
    if not _is_f32(graph, x) or type(epsilon) not in (float, int, Sc, SymScalar):
        return False
    shape = graph.avals[x].shape
    return bool(shape) and shape[-1] > 0 and _param_ok(graph, gamma, shape[-1])


def _rms_backward_supports(graph: Graph, node: Node, target: Any) -> bool:
    x, gamma, rstd, grad, *_ = node.args
    if not _is_f32(graph, x):
        return False
    shape = graph.avals[x].shape
    if not shape or shape[-1] == 0 or not _is_f32(graph, grad, shape):
        return False
    return _is_f32(graph, rstd, shape[:-1] + (1,)) and _param_ok(graph, gamma, shape[-1])


def _rms_norm(e: Emitter) -> None:
    x_ref, gamma_ref, epsilon = e.node.args
    rows, cols = _geometry(e, x_ref)
    if rows == 0:
        return
    b = e.b
    x, gamma = e.args[x_ref], e.args.get(gamma_ref)
    out, rstd_out = e.outs
    d = ir.Constant(F32, float(cols))
    eps = e.scalar(epsilon, _F32)
    zero, one = ir.Constant(F32, 0.0), ir.Constant(F32, 1.0)

    def row(r: ir.Value, _: list) -> list:
        base = b.mul(r, ir.Constant(I64, cols))

        def load(j: ir.Value) -> ir.Value:
            return e.load(x, b.add(base, j), _F32)

        def square(j: ir.Value, s: list) -> list:
            v = load(j)
            return [b.fadd(s[0], b.fmul(v, v), flags=_REASSOC)]

        (sq,) = e.loops.run(cols, square, [zero])
        rstd = b.fdiv(one, e.module.math.intr(b, "llvm.sqrt", b.fadd(b.fdiv(sq, d), eps)))

        def norm(j: ir.Value, _: list) -> list:
            value = b.fmul(load(j), rstd)
            if gamma is not None:
                value = b.fmul(value, e.load(gamma, j, _F32))
            e.store(value, out, b.add(base, j), _F32)
            return []

        e.loops.run(cols, norm)
        e.store(rstd, rstd_out, r, _F32)
        return []

    e.loops.run(rows, row)


def _rms_norm_backward(e: Emitter) -> None:
    x_ref, gamma_ref, rstd_ref, grad_ref, need_x, need_gamma = e.node.args
    rows, cols = _geometry(e, x_ref)
    outs = iter(e.outs)
    dx = next(outs) if need_x else None
    dgamma = next(outs) if need_gamma and gamma_ref is not None else None
    b = e.b
    zero = ir.Constant(F32, 0.0)
    if dgamma is not None:
        e.fill(dgamma, ir.Constant(I64, 0), cols, zero, _F32)
    if rows == 0:
        return
    x, gamma, g, rstd_in = e.args[x_ref], e.args.get(gamma_ref), e.args[grad_ref], e.args[rstd_ref]
    d = ir.Constant(F32, float(cols))

    def row(r: ir.Value, _: list) -> list:
        base = b.mul(r, ir.Constant(I64, cols))
        rstd = e.load(rstd_in, r, _F32)

        def xhat(j: ir.Value) -> ir.Value:
            return b.fmul(e.load(x, b.add(base, j), _F32), rstd)

        def grad(j: ir.Value) -> ir.Value:
            return e.load(g, b.add(base, j), _F32)

        def h(j: ir.Value) -> ir.Value:
            return grad(j) if gamma is None else b.fmul(grad(j), e.load(gamma, j, _F32))

        if dx is not None:
            (shx,) = e.loops.run(cols, lambda j, s: [b.fadd(s[0], b.fmul(h(j), xhat(j)), flags=_REASSOC)], [zero])
            mean_hx = b.fdiv(shx, d)

            def grad_x(j: ir.Value, _: list) -> list:
                e.store(b.fmul(b.fsub(h(j), b.fmul(xhat(j), mean_hx)), rstd), dx, b.add(base, j), _F32)
                return []

            e.loops.run(cols, grad_x)
        if dgamma is not None:

            def grad_gamma(j: ir.Value, _: list) -> list:
                e.store(b.fadd(e.load(dgamma, j, _F32), b.fmul(grad(j), xhat(j))), dgamma, j, _F32)
                return []

            e.loops.run(cols, grad_gamma)
        return []

    e.loops.run(rows, row)


#: op -> its lowering.
NORM_OPS: dict[str, LibraryOp] = {
    "layer_norm": LibraryOp(_forward_supports, no_scratch, _layer_norm),
    "layer_norm_backward": LibraryOp(_backward_supports, no_scratch, _layer_norm_backward),
    "rms_norm": LibraryOp(_rms_supports, no_scratch, _rms_norm),
    "rms_norm_backward": LibraryOp(_rms_backward_supports, no_scratch, _rms_norm_backward),
}

__all__ = ["NORM_OPS"]
