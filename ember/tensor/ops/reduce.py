"""Reductions, scans and sorting, with Burn's shapes.

``sum()`` and the other full reductions give a one-element rank-1 tensor;
``sum_dim(d)`` and friends keep dim ``d`` with size 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.backend.dtype import DType
from ember.backend.ops import ArgReduceOp, BinaryOp, CumulativeOp, ReduceOp
from ember.errors import ShapeError, ValueRangeError
from ember.tensor.dispatch import BOOL_NP, FLOAT_NP
from ember.tensor.shape import normalize_dim, normalize_dims

# Sums and products of bools and narrow ints are computed and returned in int64, as
# in PyTorch (a uint8 sum of 200 + 200 is 400, not 144); max/min keep the dtype.
_WIDENING = frozenset({ReduceOp.SUM, ReduceOp.PROD, CumulativeOp.CUMSUM, CumulativeOp.CUMPROD})
_BOOL_EXTREME = {ReduceOp.MAX: ReduceOp.ANY, ReduceOp.MIN: ReduceOp.ALL}
_I64_NP = DType.INT64.np


class ReduceOps:
    """Reductions along one dim or all dims, scans, sort and top-k.

    Dtypes as PyTorch: ``sum``/``prod``/``cumsum``/``cumprod`` of bool, uint8 and int32
    give int64; ``max``/``min``/``cummax``/``cummin`` keep the dtype (bool too);
    ``mean`` of ints and bools gives float32 (PyTorch refuses it).
    """

    __slots__ = ()

    def _reduce(self, op: str, name: str, dim: int | None) -> Any:
        p = self._p
        backend = self._d._b
        extreme = op in (ReduceOp.MAX, ReduceOp.MIN)
        if op in (ReduceOp.ANY, ReduceOp.ALL):
            if p.dtype != BOOL_NP:
                p = backend.binary(BinaryOp.NE, p, 0)
        elif op == ReduceOp.MEAN:
            if p.dtype not in FLOAT_NP:
                p = backend.cast(p, DType.FLOAT32)
        elif p.dtype == BOOL_NP and op in _BOOL_EXTREME:
            op = _BOOL_EXTREME[op]
        elif op in _WIDENING and p.dtype not in FLOAT_NP and p.dtype != _I64_NP:
            p = backend.cast(p, DType.INT64)
        if dim is None:
            if len(p.shape) != 1:
                p = backend.reshape(p, (-1,) if p.shape else (1,))
                p = backend.reshape(p, (p.shape[0],))
            dim = 0
        else:
            dim = normalize_dim(name, dim, len(p.shape))
        if p.shape[dim] == 0 and extreme:
            raise ShapeError(f"ember: {name}: cannot reduce an empty dim (shape {list(self._p.shape)})")
        return self.__class__(backend.reduce(op, p, dim), self._d)

    def sum(self) -> Any:
        """The sum of all elements, shape ``[1]``."""
        return self._reduce(ReduceOp.SUM, "sum", None)

    def sum_dim(self, dim: int) -> Any:
        """The sum along ``dim``, kept with size 1."""
        return self._reduce(ReduceOp.SUM, "sum_dim", dim)

    def sum_dims(self, dims: Sequence[int]) -> Any:
        out = self
        for d in normalize_dims("sum_dims", dims, len(self._p.shape)):
            out = out.sum_dim(d)
        return out

    def mean(self) -> Any:
        return self._reduce(ReduceOp.MEAN, "mean", None)

    def mean_dim(self, dim: int) -> Any:
        return self._reduce(ReduceOp.MEAN, "mean_dim", dim)

    def mean_dims(self, dims: Sequence[int]) -> Any:
        out = self
        for d in normalize_dims("mean_dims", dims, len(self._p.shape)):
            out = out.mean_dim(d)
        return out

    def prod(self) -> Any:
        return self._reduce(ReduceOp.PROD, "prod", None)

    def prod_dim(self, dim: int) -> Any:
        return self._reduce(ReduceOp.PROD, "prod_dim", dim)

    def max(self) -> Any:
        """The largest element, shape ``[1]`` (NaN propagates)."""
        return self._reduce(ReduceOp.MAX, "max", None)

    def max_dim(self, dim: int) -> Any:
        return self.max_dim_with_indices(dim)[0]

    def min(self) -> Any:
        return self._reduce(ReduceOp.MIN, "min", None)

    def min_dim(self, dim: int) -> Any:
        return self.min_dim_with_indices(dim)[0]

    def _extreme_with_indices(self, arg: str, name: str, dim: int) -> tuple[Any, Any]:
        indices = self._arg_reduce(arg, name, dim)
        return self.gather(normalize_dim(name, dim, len(self._p.shape)), indices), indices

    def max_dim_with_indices(self, dim: int) -> tuple[Any, Any]:
        """``(values, indices)`` of the maxima along ``dim`` (kept); gradients flow
        to the selected elements."""
        return self._extreme_with_indices(ArgReduceOp.ARGMAX, "max_dim_with_indices", dim)

    def min_dim_with_indices(self, dim: int) -> tuple[Any, Any]:
        return self._extreme_with_indices(ArgReduceOp.ARGMIN, "min_dim_with_indices", dim)

    def _arg_reduce(self, op: str, name: str, dim: int) -> Any:
        p = self._p
        dim = normalize_dim(name, dim, len(p.shape))
        if p.shape[dim] == 0:
            raise ShapeError(f"ember: {name}: cannot reduce an empty dim (shape {list(p.shape)})")
        if p.dtype == BOOL_NP:
            p = self._d._b.cast(p, DType.INT64)
        return self.__class__(self._d._b.arg_reduce(op, p, dim), self._d)

    def argmax(self, dim: int) -> Any:
        """Indices (int64) of the maxima along ``dim`` (kept); the first on ties."""
        return self._arg_reduce(ArgReduceOp.ARGMAX, "argmax", dim)

    def argmin(self, dim: int) -> Any:
        return self._arg_reduce(ArgReduceOp.ARGMIN, "argmin", dim)

    def any(self) -> Any:
        """Whether any element is nonzero, as a bool tensor of shape ``[1]``."""
        return self._reduce(ReduceOp.ANY, "any", None)

    def any_dim(self, dim: int) -> Any:
        return self._reduce(ReduceOp.ANY, "any_dim", dim)

    def all(self) -> Any:
        return self._reduce(ReduceOp.ALL, "all", None)

    def all_dim(self, dim: int) -> Any:
        return self._reduce(ReduceOp.ALL, "all_dim", dim)

    # ------------------------------------------------------------------ statistics
    def var(self, dim: int) -> Any:
        """The unbiased variance (divides by ``n - 1``) along ``dim``, kept."""
        return self._var(dim, 1, "var")

    def var_bias(self, dim: int) -> Any:
        """The biased variance (divides by ``n``) along ``dim``, kept."""
        return self._var(dim, 0, "var_bias")

    def var_mean(self, dim: int) -> tuple[Any, Any]:
        return self.var(dim), self.float().mean_dim(dim)

    def var_mean_bias(self, dim: int) -> tuple[Any, Any]:
        return self.var_bias(dim), self.float().mean_dim(dim)

    def std(self, dim: int) -> Any:
        """The unbiased standard deviation along ``dim``, kept; its gradient is 0 where
        it is 0 (a constant row), as in PyTorch."""
        return _root(self.var(dim), 2.0)

    def _var(self, dim: int, correction: int, name: str) -> Any:
        x = self.float()
        dim = normalize_dim(name, dim, len(x._p.shape))
        n = x._p.shape[dim]
        diff = x.sub(x.mean_dim(dim))
        return diff.mul(diff).sum_dim(dim).div_scalar(float(max(n - correction, 0)))

    def logsumexp(self, dim: int) -> Any:
        """``log(sum(exp(x)))`` along ``dim`` (kept), computed stably."""
        x = self.float()
        dim = normalize_dim("logsumexp", dim, len(x._p.shape))
        if x._p.shape[dim] == 0:
            return x.sum_dim(dim).log()  # log(0) = -inf, as PyTorch
        peak = x.max_dim(dim).detach()
        peak = peak.mask_fill(peak.is_inf(), 0.0)
        return x.sub(peak).exp().sum_dim(dim).log().add(peak)

    def norm(self, p: float = 2.0, dim: int | None = None) -> Any:
        """The ``p``-norm of all elements (shape ``[1]``) or along ``dim`` (kept). The
        gradient of a zero norm is 0, as in PyTorch."""
        x = self.float().abs()
        if p == float("inf"):  # ties share the gradient evenly, as PyTorch's vector_norm
            return x._reduce(ReduceOp.MAX, "norm", dim)
        if p == 1:
            return x.sum() if dim is None else x.sum_dim(dim)
        powered = x.mul(x) if p == 2 else x.powf_scalar(p)
        return _root(powered.sum() if dim is None else powered.sum_dim(dim), p)

    # ------------------------------------------------------------------ scans
    def _scan(self, op: str, dim: int) -> Any:
        p = self._p
        backend = self._d._b
        dim = normalize_dim(op, dim, len(p.shape))
        if op in _WIDENING and p.dtype not in FLOAT_NP and p.dtype != _I64_NP:
            return self.__class__(backend.cumulative(op, backend.cast(p, DType.INT64), dim), self._d)
        if p.dtype == BOOL_NP:  # running max/min of bools stay bool, as in PyTorch
            out = backend.cumulative(op, backend.cast(p, DType.UINT8), dim)
            return self.__class__(backend.cast(out, DType.BOOL), self._d)
        return self.__class__(backend.cumulative(op, p, dim), self._d)

    def cumsum(self, dim: int) -> Any:
        """Running sums along ``dim``."""
        return self._scan(CumulativeOp.CUMSUM, dim)

    def cumprod(self, dim: int) -> Any:
        """Running products along ``dim``."""
        return self._scan(CumulativeOp.CUMPROD, dim)

    def cummax(self, dim: int) -> Any:
        """Running maxima along ``dim``."""
        return self._scan(CumulativeOp.CUMMAX, dim)

    def cummin(self, dim: int) -> Any:
        """Running minima along ``dim``."""
        return self._scan(CumulativeOp.CUMMIN, dim)

    # ------------------------------------------------------------------ sorting
    def argsort(self, dim: int = -1, descending: bool = False) -> Any:
        """Indices (int64) that sort along ``dim``; stable; NaN sorts as the largest."""
        p = self._p
        dim = normalize_dim("argsort", dim, len(p.shape))
        if p.dtype == BOOL_NP:
            p = self._d._b.cast(p, DType.UINT8)
        return self.__class__(self._d._b.argsort(p, dim, bool(descending)), self._d)

    def sort_with_indices(self, dim: int = -1, descending: bool = False) -> tuple[Any, Any]:
        """``(values, indices)`` sorted along ``dim``; gradients flow through ``indices``."""
        indices = self.argsort(dim, descending)
        return self.gather(normalize_dim("sort", dim, len(self._p.shape)), indices), indices

    def sort(self, dim: int = -1, descending: bool = False) -> Any:
        return self.sort_with_indices(dim, descending)[0]

    def topk_with_indices(self, k: int, dim: int = -1) -> tuple[Any, Any]:
        """The ``k`` largest values along ``dim``, largest first, with their indices."""
        dim = normalize_dim("topk", dim, len(self._p.shape))
        n = self._p.shape[dim]
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= n:
            raise ValueRangeError(f"ember: topk: k must be an int in [0, {n}] for dim {dim}, got {k!r}")
        indices = self.argsort(dim, descending=True).narrow(dim, 0, k)
        return self.gather(dim, indices), indices

    def topk(self, k: int, dim: int = -1) -> Any:
        return self.topk_with_indices(k, dim)[0]


def _root(total: Any, p: float) -> Any:
    """``total ** (1 / p)`` (``sqrt`` for 2) of a sum of non-negative terms, with
    gradient 0 where ``total`` is 0: PyTorch's rule for norms and ``std`` (the plain
    root's infinite slope there, times the zero terms' gradients, would give NaN)."""
    if not total.is_require_grad():
        return total.sqrt() if p == 2 else total.powf_scalar(1.0 / p)
    zero = total.equal_elem(0.0)
    safe = total.mask_fill(zero, 1.0)
    root = safe.sqrt() if p == 2 else safe.powf_scalar(1.0 / p)
    return root.mask_fill(zero, 0.0)
