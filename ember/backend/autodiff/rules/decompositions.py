"""Matrix decompositions and solves (``Backend.linalg``): recording and backward steps.

Every step is written with backend ops, among them ``linalg`` itself, so a
``create_graph`` backward records them again and double backward works. The rules
are PyTorch's (``FunctionsManual.cpp``), real case:

* ``inv``: ``gA = -X^T G X^T``; ``solve``: ``gB = A^-T G``, ``gA = -gB X^T``;
  ``solve_triangular``: the same, kept in ``A``'s triangle;
* ``det``: ``gA = g det(A) A^-T``; for a singular matrix the adjugate from the SVD,
  ``U diag(g det(U) det(V^T) prod_{j!=i} s_j) V^T``; ``slogdet``: ``gA = g A^-T`` (complex:
  also through the sign, see ``_complex_slogdet_step``);
* ``cholesky``: ``gA = L^-T Phi(L^T G) L^-1``, ``Phi`` the symmetric part of the lower
  triangle with its diagonal halved;
* ``qr`` (reduced, ``m >= n``): ``gA = (gQ + Q copyltu(R gR^T - gQ^T Q)) R^-T``;
* ``svd``: the gauge-invariant formula (distinct singular values); ``eigh`` likewise;
* ``pinv`` and ``lstsq`` (through ``X = pinv(A) B``); ``matrix_exp``: the upper-right
  block of ``exp([[A^T, G], [0, A^T]])``.

Complex matrices follow PyTorch's convention (the gradient of a real loss is
``dL/dRe + i dL/dIm``, see ``rules.spectral``): the same formulas with conjugate
transposes (``^H`` for ``^T``) and ``conj(det)`` for ``det``; ``cholesky``'s ``Phi`` is
the Hermitian part, ``qr``'s ``copyltu`` keeps the real part of the diagonal (``R``'s
is real), ``svd`` adds the phase term ``i Im(diag(U^H gU)) / S``. Packed outputs of one
node share the complex dtype; the real ones (singular values, eigenvalues) are given
back as real parts.

An op with several differentiable outputs (``qr``, ``svd``, ``eigh``) records one node
for all of them, packed into one vector, and gives each output as a tracked slice of
it: the step gets the gradients of all outputs at once (zeros for unused ones) and,
under ``create_graph``, the outputs as tracked values.

Compute-bound: the inputs and outputs are kept.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.backend.autodiff.graph import AutodiffTensor, Own
from ember.backend.autodiff.rules.common import RecordMixin, unbroadcast
from ember.backend.autodiff.rules.spectral import COMPLEX_NP, conj
from ember.backend.dtype import DType
from ember.backend.ops import BinaryOp, ComplexOp, CumulativeOp, LinalgOp, UnaryOp
from ember.errors import GraphError


# ---------------------------------------------------------------------- helpers on ops
def _t(ops, x):
    rank = len(x.shape)
    return ops.permute(x, tuple(range(rank - 2)) + (rank - 1, rank - 2))


def _h(ops, x):
    """The conjugate transpose (the transpose of a real matrix)."""
    return conj(ops, _t(ops, x))


def _like(ops, x, ref):
    """Real ``x`` cast to complex ``ref``'s dtype (``x`` itself otherwise)."""
    if ref.dtype in COMPLEX_NP and x.dtype not in COMPLEX_NP:
        return ops.cast(x, DType.from_numpy(ref.dtype))
    return x


def _real_part(ops, x):
    """``Re(x)`` kept in ``x``'s dtype (``x`` itself when real)."""
    return _mul(ops, _add(ops, x, conj(ops, x)), 0.5) if x.dtype in COMPLEX_NP else x


def _add(ops, a, b):
    return ops.binary(BinaryOp.ADD, a, b)


def _sub(ops, a, b):
    return ops.binary(BinaryOp.SUB, a, b)


def _mul(ops, a, b):
    return ops.binary(BinaryOp.MUL, a, b)


def _div(ops, a, b):
    return ops.binary(BinaryOp.DIV, a, b)


def _neg(ops, x):
    return ops.unary(UnaryOp.NEG, x)


def _const(ops, array: np.ndarray, like) -> Any:
    return ops.from_numpy(np.ascontiguousarray(array, dtype=like.dtype))


def _tril(ops, x, k: int = 0):
    return _mul(ops, x, _const(ops, np.tri(x.shape[-2], x.shape[-1], k), x))


def _triu(ops, x, k: int = 0):
    return _mul(ops, x, _const(ops, 1 - np.tri(x.shape[-2], x.shape[-1], k - 1), x))


def _row(ops, v):
    """``v[..., None, :]``."""
    return ops.reshape(v, v.shape[:-1] + (1, v.shape[-1]))


def _col(ops, v):
    """``v[..., :, None]``."""
    return ops.reshape(v, v.shape + (1,))


def _diag_embed(ops, v):
    return _mul(ops, _row(ops, v), _const(ops, np.eye(v.shape[-1]), v))


def _scalar_mat(ops, v):
    """``v[..., None, None]``."""
    return ops.reshape(v, v.shape + (1, 1))


def _narrow(ops, x, dim: int, start: int, stop: int):
    slices = tuple((start, stop, 1) if d == dim else (0, n, 1) for d, n in enumerate(x.shape))
    return ops.slice(x, slices)


def _lin(ops, op, inputs, options=()):
    return ops.linalg(op, tuple(inputs), tuple(options))


def _right_solve_upper_h(ops, c, r):
    """``C R^-H`` for upper-triangular ``R``: ``(R^-1 C^H)^H``."""
    return _h(ops, _lin(ops, LinalgOp.SOLVE_TRIANGULAR, (r, _h(ops, c)), (True, False))[0])


def _unpack(ops, packed, shapes):
    out, start = [], 0
    for shape in shapes:
        size = int(np.prod(shape))
        out.append(ops.reshape(ops.slice(packed, ((start, start + size, 1),)), shape))
        start += size
    return out


def pinv_backward(ops, g, p, a):
    """PyTorch's ``pinv_backward``: the gradient for ``A`` of ``P = pinv(A)`` (constant rank)."""
    m, n = a.shape[-2:]
    pt, gt = _h(ops, p), _h(ops, g)
    if m <= n:
        k = ops.matmul(gt, p)
        kpt = ops.matmul(k, pt)
        first = _sub(ops, kpt, _h(ops, ops.matmul(p, k)))
        second = ops.matmul(ops.matmul(a, p), kpt)
        third = ops.matmul(ops.matmul(pt, p), _sub(ops, gt, ops.matmul(k, a)))
        return _add(ops, _sub(ops, first, second), third)
    k = ops.matmul(p, gt)
    ptk = ops.matmul(pt, k)
    first = _sub(ops, ptk, _h(ops, ops.matmul(k, p)))
    second = ops.matmul(ops.matmul(_sub(ops, gt, ops.matmul(a, k)), p), pt)
    third = ops.matmul(ops.matmul(ptk, p), a)
    return _sub(ops, _add(ops, first, second), third)


# ---------------------------------------------------------------------- steps
def _inv_step(ops, g, saved, ctx):
    xh = _h(ops, saved[0])
    return (_neg(ops, ops.matmul(ops.matmul(xh, g), xh)),)


def _solve_step(ops, g, saved, ctx):
    a, x = saved
    shape_a, shape_b, track_a, track_b = ctx
    gb = _lin(ops, LinalgOp.SOLVE, (_h(ops, a), g), (False,))[0]
    ga = unbroadcast(ops, _neg(ops, ops.matmul(gb, _h(ops, x))), shape_a) if track_a else None
    return (ga, unbroadcast(ops, gb, shape_b) if track_b else None)


def _solve_triangular_step(ops, g, saved, ctx):
    a, x = saved
    shape_a, shape_b, track_a, track_b, upper, unit = ctx
    gb = _lin(ops, LinalgOp.SOLVE_TRIANGULAR, (_h(ops, a), g), (not upper, unit))[0]
    ga = None
    if track_a:
        full = _neg(ops, ops.matmul(gb, _h(ops, x)))
        diag_off = 1 if unit else 0
        full = _triu(ops, full, diag_off) if upper else _tril(ops, full, -diag_off)
        ga = unbroadcast(ops, full, shape_a)
    return (ga, unbroadcast(ops, gb, shape_b) if track_b else None)


def _exclusive_prod(ops, s):
    """``prod_{j != i} s_j`` along the last dim, without dividing (zeros allowed)."""
    k = s.shape[-1]
    last = len(s.shape) - 1
    ones = ops.full(s.shape[:-1] + (1,), 1, DType.from_numpy(s.dtype))
    before = ops.cumulative(CumulativeOp.CUMPROD, ops.cat([ones, _narrow(ops, s, last, 0, k - 1)], last), last)
    after_rev = ops.cat([ones, ops.flip(_narrow(ops, s, last, 1, k), (last,))], last)
    after = ops.flip(ops.cumulative(CumulativeOp.CUMPROD, after_rev, last), (last,))
    return _mul(ops, before, after)


def _det_step(ops, g, saved, ctx):
    # Branch-free, so that one graph serves every input (ember.compile records it with
    # no read of the values): the inverse's answer where LAPACK found no zero pivot,
    # the SVD adjugate where it did (PyTorch's where(singular, svd form, LU form)).
    a, d = saved
    inverse, info = _lin(ops, LinalgOp.INV, (a,), (False,))
    regular = _mul(ops, _h(ops, inverse), _scalar_mat(ops, _mul(ops, g, conj(ops, d))))
    u, s, vh = _lin(ops, LinalgOp.SVD, (a,), (False,))
    sign = _mul(ops, _lin(ops, LinalgOp.DET, (u,))[0], _lin(ops, LinalgOp.DET, (vh,))[0])
    weights = _mul(ops, _col(ops, _mul(ops, g, conj(ops, sign))), _like(ops, _exclusive_prod(ops, s), a))
    adjugate = ops.matmul(_mul(ops, u, _row(ops, weights)), vh)
    singular = _scalar_mat(ops, ops.binary(BinaryOp.NE, info, 0))
    return (ops.where(singular, adjugate, regular),)


def _slogdet_step(ops, g, saved, ctx):
    inverse = _lin(ops, LinalgOp.INV, (saved[0],), (False,))[0]
    return (_mul(ops, _h(ops, inverse), _like(ops, _scalar_mat(ops, g), inverse)),)


def _complex_slogdet_step(ops, g, saved, ctx):
    """Both outputs of a complex ``slogdet``: ``gA = (g_logabs + i Im(g_sign conj(sign))) A^-H``
    (the sign ``e^{i arg det}`` moves with ``Im tr(A^-1 dA)``)."""
    sign, _ = _unpack(ops, saved[1], ctx)
    g_sign, g_logabs = _unpack(ops, g, ctx)
    turn = _mul(ops, g_sign, conj(ops, sign))
    coefficient = _add(ops, _real_part(ops, g_logabs), _sub(ops, turn, _real_part(ops, turn)))
    inverse = _lin(ops, LinalgOp.INV, (saved[0],), (False,))[0]
    return (_mul(ops, _h(ops, inverse), _scalar_mat(ops, coefficient)),)


def _cholesky_step(ops, g, saved, ctx):
    low = saved[0]
    lh = _h(ops, low)
    tri = _tril(ops, ops.matmul(lh, g))
    half = _sub(ops, tri, _mul(ops, tri, _const(ops, np.eye(tri.shape[-1]) * 0.5, tri)))  # diagonal halved
    phi = _mul(ops, _add(ops, half, _h(ops, half)), 0.5)
    x = _lin(ops, LinalgOp.SOLVE_TRIANGULAR, (lh, phi), (True, False))[0]  # L^-H Phi
    return (_right_solve_upper_h(ops, x, lh),)  # (L^-H Phi) L^-1


def _qr_step(ops, g, saved, ctx):
    mode, shapes = ctx
    m, n = saved[0].shape[-2:]
    if mode == "r" or m < n or (mode == "complete" and m > n):
        raise GraphError(
            f"ember: linalg.qr: the gradient is implemented for mode='reduced' (or 'complete' with "
            f"m == n) and m >= n, as PyTorch's; got mode={mode!r} with a {m}x{n} matrix"
        )
    q, r = _unpack(ops, saved[1], shapes)
    gq, gr = _unpack(ops, g, shapes)
    mm = _sub(ops, ops.matmul(r, _h(ops, gr)), ops.matmul(_h(ops, gq), q))
    low = _tril(ops, mm, -1)  # copyltu, with the real part of the diagonal (R's is real)
    diag = _real_part(ops, _mul(ops, mm, _const(ops, np.eye(mm.shape[-1]), mm)))
    sym = _add(ops, _add(ops, low, _h(ops, low)), diag)
    c = _add(ops, gq, ops.matmul(q, sym))
    return (_right_solve_upper_h(ops, c, r),)


def _svd_step(ops, g, saved, ctx):
    shapes, k = ctx
    a = saved[0]
    m, n = a.shape[-2:]
    u, s, vh = _unpack(ops, saved[1], shapes)
    gu, gs, gvh = _unpack(ops, g, shapes)
    if u.shape[-1] != k:  # full_matrices: the gradient of the first k columns, as PyTorch
        u, gu = _narrow(ops, u, len(u.shape) - 1, 0, k), _narrow(ops, gu, len(gu.shape) - 1, 0, k)
    if vh.shape[-2] != k:
        vh, gvh = _narrow(ops, vh, len(vh.shape) - 2, 0, k), _narrow(ops, gvh, len(gvh.shape) - 2, 0, k)
    v, gv = _h(ops, vh), _h(ops, gvh)
    # Real outputs packed as complex (see DecompositionRules._packed): their real parts,
    # so that a double backward sends them real gradients too.
    s, gs = _real_part(ops, _like(ops, s, u)), _real_part(ops, _like(ops, gs, u))
    s2 = _mul(ops, s, s)
    eye = _const(ops, np.eye(k), s)
    e = _add(ops, _sub(ops, _row(ops, s2), _col(ops, s2)), eye)  # E_ij = s_j^2 - s_i^2, 1 on the diagonal
    uhgu = ops.matmul(_h(ops, u), gu)
    vhgv = ops.matmul(vh, gv)
    skew_u = _sub(ops, uhgu, _h(ops, uhgu))
    skew_v = _sub(ops, vhgv, _h(ops, vhgv))
    inner = _div(ops, _add(ops, _mul(ops, skew_u, _row(ops, s)), _mul(ops, _col(ops, s), skew_v)), e)
    inner = _add(ops, inner, _diag_embed(ops, gs))
    if u.dtype in COMPLEX_NP:  # the phase: i Im(diag(U^H gU)) / S (PyTorch's, for a gauge-invariant loss)
        diag_u = _mul(ops, skew_u, _const(ops, np.eye(k), u))
        inner = _add(ops, inner, _div(ops, _mul(ops, diag_u, 0.5), _row(ops, s)))
    if m > k:
        gusinv = _div(ops, gu, _row(ops, s))
        proj = _sub(ops, gusinv, ops.matmul(u, ops.matmul(_h(ops, u), gusinv)))
        return (ops.matmul(_add(ops, ops.matmul(u, inner), proj), vh),)
    if n > k:
        gvsinv = _div(ops, gv, _row(ops, s))
        proj = _sub(ops, _h(ops, gvsinv), ops.matmul(ops.matmul(_h(ops, gvsinv), v), vh))
        return (ops.matmul(u, _add(ops, ops.matmul(inner, vh), proj)),)
    return (ops.matmul(u, ops.matmul(inner, vh)),)


def _svdvals_step(ops, g, saved, ctx):
    u, _, vh = _lin(ops, LinalgOp.SVD, (saved[0],), (False,))
    return (ops.matmul(_mul(ops, u, _row(ops, _like(ops, g, u))), vh),)


def _eigh_step(ops, g, saved, ctx):
    shapes = ctx
    w, v = _unpack(ops, saved[0], shapes)
    gw, gv = _unpack(ops, g, shapes)
    w, gw = _real_part(ops, _like(ops, w, v)), _real_part(ops, _like(ops, gw, v))  # as in _svd_step
    vhgv = ops.matmul(_h(ops, v), gv)
    skew = _mul(ops, _sub(ops, vhgv, _h(ops, vhgv)), 0.5)
    e = _add(ops, _sub(ops, _row(ops, w), _col(ops, w)), _const(ops, np.eye(w.shape[-1]), w))
    inner = _add(ops, _div(ops, skew, e), _diag_embed(ops, gw))
    return (ops.matmul(v, ops.matmul(inner, _h(ops, v))),)


def _eigvalsh_step(ops, g, saved, ctx):
    _, v = _lin(ops, LinalgOp.EIGH, (saved[0],), (ctx,))
    return (ops.matmul(_mul(ops, v, _row(ops, _like(ops, g, v))), _h(ops, v)),)


def _pinv_step(ops, g, saved, ctx):
    a, p = saved
    return (pinv_backward(ops, g, p, a),)


def _lstsq_step(ops, g, saved, ctx):
    a, b = saved
    shape_a, shape_b, track_a, track_b = ctx
    p = _lin(ops, LinalgOp.PINV, (a,), (None, None, False))[0]
    gb = unbroadcast(ops, ops.matmul(_h(ops, p), g), shape_b) if track_b else None
    ga = None
    if track_a:
        gp = ops.matmul(g, _h(ops, b))
        if gp.shape != p.shape:
            p = ops.expand(p, gp.shape)
            a = ops.expand(a, gp.shape[:-2] + a.shape[-2:])
        ga = unbroadcast(ops, pinv_backward(ops, gp, p, a), shape_a)
    return (ga, gb)


def _matrix_exp_step(ops, g, saved, ctx):
    at = _h(ops, saved[0])
    n = at.shape[-1]
    rank = len(at.shape)
    zeros = ops.full(at.shape, 0, DType.from_numpy(at.dtype))
    block = ops.cat([ops.cat([at, g], rank - 1), ops.cat([zeros, at], rank - 1)], rank - 2)
    e = _lin(ops, LinalgOp.MATRIX_EXP, (block,))[0]
    return (_narrow(ops, _narrow(ops, e, rank - 2, 0, n), rank - 1, n, 2 * n),)


# ---------------------------------------------------------------------- recording
class DecompositionRules(RecordMixin):
    """Recording of ``Backend.linalg``."""

    def _single(self, out: Any, inputs: tuple, step: Any, saved: tuple, ctx: Any) -> AutodiffTensor:
        return self._record(out, tuple(x.node for x in inputs), step, saved, ctx)

    def _packed(self, outs: tuple, inputs: tuple, step: Any, saved: tuple, ctx_of: Any) -> list[Any]:
        """One node for several outputs (see the module docstring)."""
        inner = self.inner
        shapes = tuple(tuple(o.shape) for o in outs)
        # Complex factors pack their real outputs (singular values, eigenvalues) as
        # complex; the views give them back as real parts.
        dtype = next((o.dtype for o in outs if o.dtype in COMPLEX_NP), outs[0].dtype)
        flat = [inner.reshape(o if o.dtype == dtype else inner.cast(o, DType.from_numpy(dtype)), (-1,)) for o in outs]
        packed = inner.cat(flat, 0)
        node_out = self._record(packed, tuple(x.node for x in inputs), step, saved + (Own(packed),), ctx_of(shapes))
        views, start = [], 0
        for shape, o in zip(shapes, outs):
            size = int(np.prod(shape))
            view = self.reshape(self.slice(node_out, ((start, start + size, 1),)), shape)  # type: ignore[attr-defined]
            views.append(view if o.dtype == dtype else self.complex_unary(ComplexOp.REAL, view))  # type: ignore[attr-defined]
            start += size
        return views

    def linalg(self, op: LinalgOp, inputs: tuple, options: tuple = ()) -> tuple:
        outs = self.inner.linalg(op, tuple(x.inner for x in inputs), options)
        if all(x.node is None for x in inputs):
            return tuple(AutodiffTensor(o, None) for o in outs)
        plain = [AutodiffTensor(o, None) for o in outs]
        keep = tuple(self._keep(x) for x in inputs)
        first = inputs[0]
        if op in (LinalgOp.SOLVE, LinalgOp.SOLVE_TRIANGULAR, LinalgOp.LSTSQ):
            a, b = inputs
            ctx: Any = (a.shape, b.shape, a.node is not None, b.node is not None)
            if op is LinalgOp.LSTSQ:
                plain[0] = self._single(outs[0], inputs, _lstsq_step, keep, ctx)
            else:
                step = _solve_step if op is LinalgOp.SOLVE else _solve_triangular_step
                ctx = ctx if op is LinalgOp.SOLVE else ctx + tuple(options)
                plain[0] = self._single(outs[0], inputs, step, (keep[0], Own(outs[0])), ctx)
        elif op is LinalgOp.INV:
            plain[0] = self._single(outs[0], inputs, _inv_step, (Own(outs[0]),), None)
        elif op is LinalgOp.DET:
            plain[0] = self._single(outs[0], inputs, _det_step, (keep[0], Own(outs[0])), None)
        elif op is LinalgOp.SLOGDET and outs[0].dtype in COMPLEX_NP:  # the sign is differentiable too
            plain = self._packed(outs, inputs, _complex_slogdet_step, keep, lambda shapes: shapes)
        elif op is LinalgOp.SLOGDET:
            plain[1] = self._single(outs[1], inputs, _slogdet_step, keep, None)
        elif op is LinalgOp.CHOLESKY:
            plain[0] = self._single(outs[0], inputs, _cholesky_step, (Own(outs[0]),), None)
        elif op is LinalgOp.QR:
            if options[0] == "r":
                plain[1] = self._single(outs[1], inputs, _qr_step, keep, ("r", ()))
            else:
                plain[:2] = self._packed(outs[:2], inputs, _qr_step, keep, lambda shapes: (options[0], shapes))
        elif op is LinalgOp.SVD:
            k = min(first.shape[-2:])
            plain = self._packed(outs, inputs, _svd_step, keep, lambda shapes: (shapes, k))
        elif op is LinalgOp.SVDVALS:
            plain[0] = self._single(outs[0], inputs, _svdvals_step, keep, None)
        elif op is LinalgOp.EIGH:
            plain = self._packed(outs, inputs, _eigh_step, (), lambda shapes: shapes)
        elif op is LinalgOp.EIGVALSH:
            plain[0] = self._single(outs[0], inputs, _eigvalsh_step, keep, options[0])
        elif op is LinalgOp.PINV:
            plain[0] = self._single(outs[0], inputs, _pinv_step, (keep[0], Own(outs[0])), None)
        elif op is LinalgOp.MATRIX_EXP:
            plain[0] = self._single(outs[0], inputs, _matrix_exp_step, keep, None)
        return tuple(plain)
