"""Reductions and scans: forward recording and backward steps side by side.

Reductions are compute-bound: their outputs are kept under balanced checkpointing.
"""

from __future__ import annotations

from ember.backend.autodiff.graph import AutodiffTensor
from ember.backend.autodiff.rules.common import RecordMixin, zeros
from ember.backend.dtype import DType
from ember.backend.ops import ArgReduceOp, BinaryOp, CumulativeOp, ReduceOp, UnaryOp


def _exclusive_cumprod(ops, x, dim):
    """``out[i] = prod(x[:i])`` along ``dim`` (1 for the first element)."""
    n = x.shape[dim]
    ones_shape = x.shape[:dim] + (1,) + x.shape[dim + 1 :]
    ones = ops.full(ones_shape, 1, DType.from_numpy(x.dtype))
    if n <= 1:
        return ops.expand(ones, x.shape)
    head = ops.slice(x, tuple((0, s, 1) if d != dim else (0, n - 1, 1) for d, s in enumerate(x.shape)))
    return ops.cat([ones, ops.cumulative(CumulativeOp.CUMPROD, head, dim)], dim)


def _product_of_others(ops, x, dim):
    """``prod(x[j] for j != i)`` along ``dim``, exact when ``x`` holds zeros."""
    left = _exclusive_cumprod(ops, x, dim)
    right = ops.flip(_exclusive_cumprod(ops, ops.flip(x, (dim,)), dim), (dim,))
    return ops.binary(BinaryOp.MUL, left, right)


def _reduce_step(ops, g, saved, ctx):
    op, dim, shape = ctx
    x, out = saved
    if op == ReduceOp.SUM:
        return (ops.expand(g, shape),)
    if op == ReduceOp.MEAN:
        return (ops.expand(ops.binary(BinaryOp.DIV, g, float(shape[dim])), shape),)
    if op == ReduceOp.PROD:
        return (ops.binary(BinaryOp.MUL, ops.expand(g, shape), _product_of_others(ops, x, dim)),)
    # max / min: the gradient is shared evenly by the elements equal to the extreme.
    hit = ops.cast(ops.binary(BinaryOp.EQ, x, out), DType.from_numpy(x.dtype))
    count = ops.reduce(ReduceOp.SUM, hit, dim)
    return (ops.binary(BinaryOp.MUL, hit, ops.binary(BinaryOp.DIV, g, count)),)


def _scan_step(ops, g, saved, ctx):
    x, out = saved
    op, dim = ctx
    if op == CumulativeOp.CUMSUM:
        return (ops.flip(ops.cumulative(CumulativeOp.CUMSUM, ops.flip(g, (dim,)), dim), (dim,)),)
    if op == CumulativeOp.CUMPROD:
        return (_cumprod_grad(ops, g, x, out, dim),)
    if op == CumulativeOp.LOGCUMSUMEXP:
        return (_logcumsumexp_grad(ops, g, x, out, dim),)
    # cummax / cummin: each output came from the latest index holding the running extreme.
    n = x.shape[dim]
    positions = ops.reshape(ops.arange(0, n, 1, DType.INT64), tuple(n if d == dim else 1 for d in range(len(x.shape))))
    is_source = ops.binary(BinaryOp.EQ, x, out)
    source = ops.cumulative(CumulativeOp.CUMMAX, ops.where(is_source, ops.expand(positions, x.shape), 0), dim)
    return (ops.scatter_add(zeros(ops, x.shape, x.dtype), dim, source, g),)


def _logcumsumexp_grad(ops, g, x, out, dim):
    """``grad[i] = sum_{j >= i} g[j] exp(x[i] - out[j])``, stably: the positive and the
    negative parts of ``g`` each as ``exp(x + reversed_logcumsumexp(log|g| - out))``,
    whose exponent never exceeds ``log sum |g|``."""

    def part(gp):
        shifted = ops.binary(BinaryOp.SUB, ops.unary(UnaryOp.LOG, gp), out)
        tail = ops.flip(ops.cumulative(CumulativeOp.LOGCUMSUMEXP, ops.flip(shifted, (dim,)), dim), (dim,))
        return ops.unary(UnaryOp.EXP, ops.binary(BinaryOp.ADD, x, tail))

    positive = part(ops.clamp(g, 0.0, None))
    negative = part(ops.clamp(ops.unary(UnaryOp.NEG, g), 0.0, None))
    return ops.binary(BinaryOp.SUB, positive, negative)


def _cumprod_grad(ops, g, x, out, dim):
    """Gradient of ``cumprod``: ``sum_{j >= i} g[j] * prod_{k <= j, k != i} x[k]``."""
    has_zero = bool(
        ops.to_numpy(ops.reduce(ReduceOp.ANY, ops.reshape(ops.binary(BinaryOp.EQ, x, 0.0), (-1,)), 0)).reshape(-1)[0]
    )
    if not has_zero:
        rev = ops.flip(
            ops.cumulative(CumulativeOp.CUMSUM, ops.flip(ops.binary(BinaryOp.MUL, g, out), (dim,)), dim), (dim,)
        )
        return ops.binary(BinaryOp.DIV, rev, x)
    # With zeros: an explicit (n x n) sum over the scan, exact for any input.
    n = x.shape[dim]
    rank = len(x.shape)
    xm = ops.permute(x, tuple(d for d in range(rank) if d != dim) + (dim,))
    gm = ops.permute(g, tuple(d for d in range(rank) if d != dim) + (dim,))
    batch = xm.shape[:-1]
    dtype = DType.from_numpy(x.dtype)
    i_idx = ops.reshape(ops.arange(0, n, 1, DType.INT64), (n, 1))
    k_idx = ops.reshape(ops.arange(0, n, 1, DType.INT64), (1, n))
    grads = []
    for j in range(n):
        # factors[..., i, k] = x[k] for k <= j, k != i; else 1
        keep = ops.binary(
            BinaryOp.LOGICAL_AND, ops.binary(BinaryOp.LE, k_idx, j), ops.binary(BinaryOp.NE, k_idx, i_idx)
        )
        factors = ops.where(keep, ops.expand(ops.reshape(xm, batch + (1, n)), batch + (n, n)), 1.0)
        prod = ops.reshape(ops.reduce(ReduceOp.PROD, factors, len(batch) + 1), batch + (n,))
        mask = ops.cast(ops.binary(BinaryOp.LE, ops.reshape(i_idx, (n,)), j), dtype)
        gj = ops.slice(gm, tuple((0, s, 1) for s in batch) + ((j, j + 1, 1),))
        grads.append(ops.binary(BinaryOp.MUL, ops.binary(BinaryOp.MUL, prod, mask), gj))
    total = grads[0]
    for extra in grads[1:]:
        total = ops.binary(BinaryOp.ADD, total, extra)
    inverse = [0] * rank
    for position, d in enumerate(tuple(d for d in range(rank) if d != dim) + (dim,)):
        inverse[d] = position
    return ops.permute(total, tuple(inverse))


class ReduceRules(RecordMixin):
    """Recording of reductions and scans."""

    def reduce(self, op: ReduceOp, x: AutodiffTensor, dim: int) -> AutodiffTensor:
        out = self.inner.reduce(op, x.inner, dim)
        if x.node is None or op in (ReduceOp.ANY, ReduceOp.ALL):
            return AutodiffTensor(out, None)
        needs_values = op in (ReduceOp.PROD, ReduceOp.MAX, ReduceOp.MIN)
        saved = (
            self._keep(x) if needs_values else None,
            self._out(out, False) if op in (ReduceOp.MAX, ReduceOp.MIN) else None,
        )
        return self._record(out, (x.node,), _reduce_step, saved, (op, dim, x.shape))

    def arg_reduce(self, op: ArgReduceOp, x: AutodiffTensor, dim: int) -> AutodiffTensor:
        return AutodiffTensor(self.inner.arg_reduce(op, x.inner, dim), None)

    def argsort(self, x: AutodiffTensor, dim: int, descending: bool) -> AutodiffTensor:
        return AutodiffTensor(self.inner.argsort(x.inner, dim, descending), None)

    def cumulative(self, op: CumulativeOp, x: AutodiffTensor, dim: int) -> AutodiffTensor:
        out = self.inner.cumulative(op, x.inner, dim)
        if x.node is None:
            return AutodiffTensor(out, None)
        saved = (None, None) if op == CumulativeOp.CUMSUM else (self._keep(x), self._out(out, False))
        return self._record(out, (x.node,), _scan_step, saved, (op, dim))
