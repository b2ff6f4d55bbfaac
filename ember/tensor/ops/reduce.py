"""Reductions, scans and sorting, with Burn's shapes.

``sum()`` and the other full reductions give a one-element rank-1 tensor;
``sum_dim(d)`` and friends keep dim ``d`` with size 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ember.backend.dtype import DType
from ember.backend.ops import ArgReduceOp, BinaryOp, CumulativeOp, ReduceOp
from ember.errors import DTypeError, ShapeError, ValueRangeError
from ember.tensor import autocast
from ember.tensor.checks import BOOL_NP, FLOAT_NP
from ember.tensor.ops.base import TensorOpsBase
from ember.tensor.ops.pytorch_hints import reduction_error
from ember.tensor.ops.rank0 import rank0_as_vector
from ember.tensor.shape import normalize_dim, normalize_dims

if TYPE_CHECKING:
    from typing import Self

# Sums and products of bools and narrow ints are computed and returned in int64, as
# in PyTorch (a uint8 sum of 200 + 200 is 400, not 144); max/min keep the dtype.
_WIDENING = frozenset({ReduceOp.SUM, ReduceOp.PROD, CumulativeOp.CUMSUM, CumulativeOp.CUMPROD})
_BOOL_EXTREME = {ReduceOp.MAX: ReduceOp.ANY, ReduceOp.MIN: ReduceOp.ALL}
_I64_NP = DType.INT64.np


class ReduceOps(TensorOpsBase):
    """Reductions along one dim or all dims, scans, sort and top-k.

    Dtypes as PyTorch: ``sum``/``prod``/``cumsum``/``cumprod`` of bool, uint8 and int32
    give int64; ``max``/``min``/``cummax``/``cummin`` keep the dtype (bool too);
    ``mean`` of ints and bools gives float32 (PyTorch refuses it).
    """

    __slots__ = ()

    @rank0_as_vector("dim")
    def _reduce(self, op: ReduceOp, name: str, dim: int | None) -> Self:
        if autocast.ACTIVE:
            self = autocast.cast_input(op.value, self)
        p = self._primitive
        backend = self._device._backend
        extreme = op in (ReduceOp.MAX, ReduceOp.MIN)
        if p.dtype.kind == "c":
            if op not in (ReduceOp.SUM, ReduceOp.MEAN, ReduceOp.ANY, ReduceOp.ALL):
                raise DTypeError(
                    f"ember: {name}: not defined on complex tensors (dtype {self.dtype}), as in PyTorch; "
                    "reduce .abs(), .real() or .imag() instead"
                )
            if op in (ReduceOp.ANY, ReduceOp.ALL):
                p = backend.binary(BinaryOp.NE, p, 0)
        elif op in (ReduceOp.ANY, ReduceOp.ALL):
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
            raise ShapeError(f"ember: {name}: cannot reduce an empty dim (shape {list(self._primitive.shape)})")
        return self.__class__(backend.reduce(op, p, dim), self._device)

    def sum(self, *args: Any, **kwargs: Any) -> Self:
        """The sum of all elements, shape ``[1]``."""
        if args or kwargs:  # PyTorch's x.sum(dim): ember's spelling is in the error
            raise reduction_error(self, "sum", args, kwargs)
        return self._reduce(ReduceOp.SUM, "sum", None)

    def sum_dim(self, dim: int) -> Self:
        """The sum along ``dim``, kept with size 1."""
        return self._reduce(ReduceOp.SUM, "sum_dim", dim)

    @rank0_as_vector("dims")
    def sum_dims(self, dims: Sequence[int]) -> Self:
        out = self
        for d in normalize_dims("sum_dims", dims, len(self._primitive.shape)):
            out = out.sum_dim(d)
        return out

    @rank0_as_vector("dims")
    def sum_dims_squeeze(self, dims: Sequence[int]) -> Self:
        """The sum along ``dims``, which are removed (Burn's ``sum_dims_squeeze``)."""
        dims = normalize_dims("sum_dims_squeeze", dims, len(self._primitive.shape))
        out = self.sum_dims(dims)
        return out.reshape(tuple(n for i, n in enumerate(out._primitive.shape) if i not in dims)) if dims else out

    def mean(self, *args: Any, **kwargs: Any) -> Self:
        if args or kwargs:  # PyTorch's x.mean(dim): ember's spelling is in the error
            raise reduction_error(self, "mean", args, kwargs)
        return self._reduce(ReduceOp.MEAN, "mean", None)

    def mean_dim(self, dim: int) -> Self:
        return self._reduce(ReduceOp.MEAN, "mean_dim", dim)

    @rank0_as_vector("dims")
    def mean_dims(self, dims: Sequence[int]) -> Self:
        out = self
        for d in normalize_dims("mean_dims", dims, len(self._primitive.shape)):
            out = out.mean_dim(d)
        return out

    def max_dims(self, dims: Sequence[int]) -> Self:
        """The maxima along each of ``dims`` (all kept with size 1)."""
        return self._fold_dims("max_dims", dims, "max_dim")

    def min_dims(self, dims: Sequence[int]) -> Self:
        return self._fold_dims("min_dims", dims, "min_dim")

    def prod_dims(self, dims: Sequence[int]) -> Self:
        return self._fold_dims("prod_dims", dims, "prod_dim")

    def any_dims(self, dims: Sequence[int]) -> Self:
        return self._fold_dims("any_dims", dims, "any_dim")

    def all_dims(self, dims: Sequence[int]) -> Self:
        return self._fold_dims("all_dims", dims, "all_dim")

    @rank0_as_vector("dims")
    def _fold_dims(self, name: str, dims: Sequence[int], method: str) -> Self:
        out = self
        for d in normalize_dims(name, [dims] if isinstance(dims, int) else dims, len(self._primitive.shape)):
            out = getattr(out, method)(d)
        return out

    @rank0_as_vector("dim")
    def _torch_reduce(self, name: str, dim: Any, keepdim: bool, method: str, full: str) -> Self:
        """PyTorch's form of a reduction: all dims (``dim=None``) or some, squeezed
        unless ``keepdim``."""
        rank = len(self._primitive.shape)
        if dim is None:
            out = getattr(self, full)()
            return out.reshape((1,) * rank) if keepdim else out.reshape(())
        dims = normalize_dims(name, [dim] if isinstance(dim, int) else dim, rank)
        out = self._fold_dims(name, dims, method)
        return out if keepdim else out.squeeze_dims(list(dims)) if dims else out

    def amax(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Self:
        """``torch.amax``: the maximum over ``dim`` (all dims when ``None``), squeezed
        unless ``keepdim``; ties share the gradient evenly."""
        return self._torch_reduce("amax", dim, keepdim, "_max_dim_even", "max")

    def amin(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Self:
        return self._torch_reduce("amin", dim, keepdim, "_min_dim_even", "min")

    def _max_dim_even(self, dim: int) -> Self:
        return self._reduce(ReduceOp.MAX, "amax", dim)

    def _min_dim_even(self, dim: int) -> Self:
        return self._reduce(ReduceOp.MIN, "amin", dim)

    def aminmax(self, dim: int | None = None, keepdim: bool = False) -> tuple[Any, Any]:
        """``(amin, amax)`` (``torch.aminmax``)."""
        return self.amin(dim, keepdim), self.amax(dim, keepdim)

    def max_abs(self) -> Self:
        """The largest absolute value, shape ``[1]`` (Burn's)."""
        return self.abs().max() if self._primitive.dtype != BOOL_NP else self.max()

    def max_abs_dim(self, dim: int) -> Self:
        return (self.abs() if self._primitive.dtype != BOOL_NP else self).max_dim(dim)

    def max_abs_dims(self, dims: Sequence[int]) -> Self:
        return (self.abs() if self._primitive.dtype != BOOL_NP else self).max_dims(dims)

    def count_nonzero(self, dim: int | None = None) -> Self:
        """The number of nonzero elements (int64): all (shape ``[1]``) or along ``dim`` (kept)."""
        nonzero = self.not_equal_elem(False if self._primitive.dtype == BOOL_NP else 0).int()
        return nonzero.sum() if dim is None else nonzero.sum_dim(dim)

    def nansum(self) -> Self:
        """The sum ignoring NaNs, shape ``[1]``."""
        return self._without_nan().sum()

    def nansum_dim(self, dim: int) -> Self:
        return self._without_nan().sum_dim(dim)

    def nanmean(self) -> Self:
        """The mean of the non-NaN elements, shape ``[1]``."""
        kept = self.float().is_nan().bool_not().float()
        return self._without_nan().float().sum().div(kept.sum())

    def nanmean_dim(self, dim: int) -> Self:
        kept = self.float().is_nan().bool_not().float()
        return self._without_nan().float().sum_dim(dim).div(kept.sum_dim(dim))

    def _without_nan(self) -> Self:
        if self._primitive.dtype not in FLOAT_NP:
            return self
        return self.mask_fill(self.is_nan(), 0.0)

    def prod(self, *args: Any, **kwargs: Any) -> Self:
        if args or kwargs:  # PyTorch's x.prod(dim): ember's spelling is in the error
            raise reduction_error(self, "prod", args, kwargs)
        return self._reduce(ReduceOp.PROD, "prod", None)

    def prod_dim(self, dim: int) -> Self:
        return self._reduce(ReduceOp.PROD, "prod_dim", dim)

    def max(self, *args: Any, **kwargs: Any) -> Self:
        """The largest element, shape ``[1]`` (NaN propagates)."""
        if args or kwargs:  # PyTorch's x.max(dim): ember's spelling is in the error
            raise reduction_error(self, "max", args, kwargs)
        return self._reduce(ReduceOp.MAX, "max", None)

    def max_dim(self, dim: int) -> Self:
        return self.max_dim_with_indices(dim)[0]

    def min(self, *args: Any, **kwargs: Any) -> Self:
        if args or kwargs:  # PyTorch's x.min(dim): ember's spelling is in the error
            raise reduction_error(self, "min", args, kwargs)
        return self._reduce(ReduceOp.MIN, "min", None)

    def min_dim(self, dim: int) -> Self:
        return self.min_dim_with_indices(dim)[0]

    @rank0_as_vector("dim")
    def _extreme_with_indices(self, arg: ArgReduceOp, name: str, dim: int) -> tuple[Any, Any]:
        indices = self._arg_reduce(arg, name, dim)
        return self.gather(normalize_dim(name, dim, len(self._primitive.shape)), indices), indices

    def max_dim_with_indices(self, dim: int) -> tuple[Any, Any]:
        """``(values, indices)`` of the maxima along ``dim`` (kept); gradients flow
        to the selected elements."""
        return self._extreme_with_indices(ArgReduceOp.ARGMAX, "max_dim_with_indices", dim)

    def min_dim_with_indices(self, dim: int) -> tuple[Any, Any]:
        return self._extreme_with_indices(ArgReduceOp.ARGMIN, "min_dim_with_indices", dim)

    @rank0_as_vector("dim")
    def _arg_reduce(self, op: ArgReduceOp, name: str, dim: int) -> Self:
        p = self._primitive
        dim = normalize_dim(name, dim, len(p.shape))
        if p.shape[dim] == 0:
            raise ShapeError(f"ember: {name}: cannot reduce an empty dim (shape {list(p.shape)})")
        if p.dtype == BOOL_NP:
            p = self._device._backend.cast(p, DType.INT64)
        elif p.dtype.kind == "c":
            raise DTypeError(f"ember: {name}: not defined on complex tensors (dtype {self.dtype}); use .abs() first")
        return self.__class__(self._device._backend.arg_reduce(op, p, dim), self._device)

    def argmax(self, dim: int | None = None, keepdim: bool | None = None) -> Self:
        """Indices (int64) of the maxima along ``dim``, kept with size 1 (Burn's form)
        unless ``keepdim=False`` (PyTorch's default, which must be asked for here);
        the first on ties. Without ``dim``, the flat index of the maximum, shape ``[1]``."""
        return self._arg_extreme(ArgReduceOp.ARGMAX, "argmax", dim, keepdim)

    def argmin(self, dim: int | None = None, keepdim: bool | None = None) -> Self:
        return self._arg_extreme(ArgReduceOp.ARGMIN, "argmin", dim, keepdim)

    @rank0_as_vector("dim")
    def _arg_extreme(self, op: Any, name: str, dim: int | None, keepdim: bool | None) -> Self:
        if dim is None:
            return self.reshape((-1,))._arg_reduce(op, name, 0)
        out = self._arg_reduce(op, name, dim)
        return out.squeeze_dim(dim) if keepdim is False else out

    def any(self, *args: Any, **kwargs: Any) -> Self:
        """Whether any element is nonzero, as a bool tensor of shape ``[1]``."""
        if args or kwargs:  # PyTorch's x.any(dim): ember's spelling is in the error
            raise reduction_error(self, "any", args, kwargs)
        return self._reduce(ReduceOp.ANY, "any", None)

    def any_dim(self, dim: int) -> Self:
        return self._reduce(ReduceOp.ANY, "any_dim", dim)

    def all(self, *args: Any, **kwargs: Any) -> Self:
        if args or kwargs:  # PyTorch's x.all(dim): ember's spelling is in the error
            raise reduction_error(self, "all", args, kwargs)
        return self._reduce(ReduceOp.ALL, "all", None)

    def all_dim(self, dim: int) -> Self:
        return self._reduce(ReduceOp.ALL, "all_dim", dim)

    # ------------------------------------------------------------------ statistics
    def var(self, dim: int | None = None, correction: float = 1) -> Self:
        """The variance along ``dim`` (kept; all elements, shape ``[1]``, when ``None``),
        dividing by ``n - correction`` (1: unbiased, 0: biased; as PyTorch's)."""
        return self._var(dim, correction, "var")

    def var_bias(self, dim: int) -> Self:
        """The biased variance (divides by ``n``) along ``dim``, kept."""
        return self._var(dim, 0, "var_bias")

    @rank0_as_vector("dim")
    def var_mean(self, dim: int | None = None, correction: float = 1) -> tuple[Any, Any]:
        x = self.float() if dim is not None else self.float().reshape((-1,))
        d = 0 if dim is None else dim
        return x._var(d, correction, "var_mean"), x.mean_dim(d)

    def var_mean_bias(self, dim: int) -> tuple[Any, Any]:
        return self.var_bias(dim), self.float().mean_dim(dim)

    def std(self, dim: int | None = None, correction: float = 1) -> Self:
        """The standard deviation: the square root of :meth:`var`; its gradient is 0
        where it is 0 (a constant row), as in PyTorch."""
        return _root(self._var(dim, correction, "std"), 2.0)

    def std_mean(self, dim: int | None = None, correction: float = 1) -> tuple[Any, Any]:
        var, mean = self.var_mean(dim, correction)
        return _root(var, 2.0), mean

    @rank0_as_vector("dim")
    def _var(self, dim: int | None, correction: float, name: str) -> Self:
        x = self.float()
        if dim is None:
            x, dim = x.reshape((-1,)), 0
        if isinstance(correction, bool) or not isinstance(correction, (int, float)):
            raise ValueRangeError(f"ember: {name}: correction must be a number, got {correction!r}")
        dim = normalize_dim(name, dim, len(x._primitive.shape))
        n = x._primitive.shape[dim]
        diff = x.sub(x.mean_dim(dim))
        return diff.mul(diff).sum_dim(dim).div_scalar(float(max(n - correction, 0)))

    @rank0_as_vector("dim")
    def logsumexp(self, dim: int) -> Self:
        """``log(sum(exp(x)))`` along ``dim`` (kept), computed stably."""
        x = self.float()
        if autocast.ACTIVE:
            x = autocast.cast_input("logsumexp", x)
        dim = normalize_dim("logsumexp", dim, len(x._primitive.shape))
        if x._primitive.shape[dim] == 0:
            return x.sum_dim(dim).log()  # log(0) = -inf, as PyTorch
        peak = x.max_dim(dim).detach()
        peak = peak.mask_fill(peak.is_inf(), 0.0)
        return x.sub(peak).exp().sum_dim(dim).log().add(peak)

    def norm(self, p: float = 2.0, dim: int | None = None) -> Self:
        """The ``p``-norm of all elements (shape ``[1]``) or along ``dim`` (kept):
        ``(sum |x|^p)^(1/p)``; ``p=inf`` the largest and ``p=-inf`` the smallest
        magnitude, ``p=0`` the number of nonzero elements (as PyTorch's ``vector_norm``).
        The gradient of a zero norm is 0, as in PyTorch."""
        x = self.float()
        if autocast.ACTIVE:
            x = autocast.cast_input("norm", x)
        x = x.abs()
        if p == float("inf"):  # ties share the gradient evenly, as PyTorch's vector_norm
            return x._reduce(ReduceOp.MAX, "norm", dim)
        if p == float("-inf"):
            return x._reduce(ReduceOp.MIN, "norm", dim)
        if p == 0:
            nonzero = x.not_equal_elem(0.0).cast(x.dtype)
            return nonzero.sum() if dim is None else nonzero.sum_dim(dim)
        if p == 1:
            return x.sum() if dim is None else x.sum_dim(dim)
        powered = x.mul(x) if p == 2 else x.powf_scalar(p)
        return _root(powered.sum() if dim is None else powered.sum_dim(dim), p)

    # ------------------------------------------------------------------ scans
    @rank0_as_vector("dim")
    def _scan(self, op: CumulativeOp, dim: int) -> Self:
        if autocast.ACTIVE:
            self = autocast.cast_input(op.value, self)
        p = self._primitive
        backend = self._device._backend
        dim = normalize_dim(op, dim, len(p.shape))
        if p.dtype.kind == "c":
            if op != CumulativeOp.CUMSUM:
                raise DTypeError(f"ember: {op}: not defined on complex tensors (dtype {self.dtype}); use cumsum")
            return self.__class__(backend.cumulative(op, p, dim), self._device)
        if op in _WIDENING and p.dtype not in FLOAT_NP and p.dtype != _I64_NP:
            return self.__class__(backend.cumulative(op, backend.cast(p, DType.INT64), dim), self._device)
        if p.dtype == BOOL_NP:  # running max/min of bools stay bool, as in PyTorch
            out = backend.cumulative(op, backend.cast(p, DType.UINT8), dim)
            return self.__class__(backend.cast(out, DType.BOOL), self._device)
        return self.__class__(backend.cumulative(op, p, dim), self._device)

    def cumsum(self, dim: int) -> Self:
        """Running sums along ``dim``."""
        return self._scan(CumulativeOp.CUMSUM, dim)

    def cumprod(self, dim: int) -> Self:
        """Running products along ``dim``."""
        return self._scan(CumulativeOp.CUMPROD, dim)

    def cummax(self, dim: int) -> Self:
        """Running maxima along ``dim`` (Burn's; PyTorch's is :meth:`cummax_with_indices`)."""
        return self._scan(CumulativeOp.CUMMAX, dim)

    def cummin(self, dim: int) -> Self:
        """Running minima along ``dim``."""
        return self._scan(CumulativeOp.CUMMIN, dim)

    def cummax_with_indices(self, dim: int) -> tuple[Any, Any]:
        """``(values, indices)``: the running maxima along ``dim`` and where each was
        found (the latest position on ties; a NaN, once seen, stays the maximum)."""
        return self._scan_with_indices(CumulativeOp.CUMMAX, dim)

    def cummin_with_indices(self, dim: int) -> tuple[Any, Any]:
        return self._scan_with_indices(CumulativeOp.CUMMIN, dim)

    @rank0_as_vector("dim")
    def _scan_with_indices(self, op: CumulativeOp, dim: int) -> tuple[Any, Any]:
        values = self._scan(op, dim)
        dim = normalize_dim(op, dim, len(self._primitive.shape))
        x = self if self._primitive.dtype != BOOL_NP else self.int()
        source = x.equal(values)
        if x._primitive.dtype in FLOAT_NP:
            source = source.bool_or(x.is_nan())
        n = self._primitive.shape[dim]
        positions = self.__class__.arange(n, device=self._device).reshape(
            tuple(n if d == dim else 1 for d in range(len(self._primitive.shape)))
        )
        indices = positions.expand(self._primitive.shape).mask_fill(source.bool_not(), 0).cummax(dim)
        return values, indices

    @rank0_as_vector("dim")
    def logcumsumexp(self, dim: int) -> Self:
        """``log(cumsum(exp(x)))`` along ``dim``, computed stably (a scan of ``logaddexp``)."""
        x = self.float()
        dim = normalize_dim("logcumsumexp", dim, len(x._primitive.shape))
        return self.__class__(
            self._device._backend.cumulative(CumulativeOp.LOGCUMSUMEXP, x._primitive, dim), self._device
        )

    # ------------------------------------------------------------------ order statistics
    def median(self, dim: int | None = None) -> Self:
        """The median along ``dim`` (kept; all elements, shape ``[1]``, when ``None``):
        the lower of the two middle values for an even count; NaN if the slice holds one
        (as PyTorch's)."""
        if dim is None:
            return self.reshape((-1,)).median_with_indices(0)[0]
        return self.median_with_indices(dim)[0]

    @rank0_as_vector("dim")
    def median_with_indices(self, dim: int) -> tuple[Any, Any]:
        """``(values, indices)`` of :meth:`median` along ``dim`` (kept)."""
        dim = normalize_dim("median", dim, len(self._primitive.shape))
        n = self._primitive.shape[dim]
        if n == 0:
            raise ShapeError(
                f"ember: median: cannot take the median of an empty dim (shape {list(self._primitive.shape)})"
            )
        return self._kth(dim, (n - 1) // 2, "median")

    @rank0_as_vector("dim")
    def kthvalue(self, k: int, dim: int = -1) -> tuple[Any, Any]:
        """``(values, indices)`` of the ``k``-th smallest element (1-based) along ``dim``
        (kept); NaN counts as the largest."""
        dim = normalize_dim("kthvalue", dim, len(self._primitive.shape))
        n = self._primitive.shape[dim]
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
            raise ValueRangeError(f"ember: kthvalue: k must be an int in [1, {n}], got {k!r}")
        order = self.argsort(dim).narrow(dim, k - 1, 1)
        return self.gather(dim, order), order

    def _kth(self, dim: int, position: int, name: str) -> tuple[Any, Any]:
        order = self.argsort(dim).narrow(dim, position, 1)
        values = self.gather(dim, order)
        if self._primitive.dtype not in FLOAT_NP:
            return values, order
        nan = self.is_nan()
        has_nan = nan.any_dim(dim)
        first_nan = nan.int().argmax(dim)
        return values.mask_fill(has_nan, float("nan")), order.mask_where(has_nan, first_nan)

    # ------------------------------------------------------------------ sorting
    @rank0_as_vector("dim")
    def argsort(self, dim: int = -1, descending: bool = False) -> Self:
        """Indices (int64) that sort along ``dim``; stable; NaN sorts as the largest."""
        p = self._primitive
        dim = normalize_dim("argsort", dim, len(p.shape))
        if p.dtype == BOOL_NP:
            p = self._device._backend.cast(p, DType.UINT8)
        return self.__class__(self._device._backend.argsort(p, dim, bool(descending)), self._device)

    @rank0_as_vector("dim")
    def sort_with_indices(self, dim: int = -1, descending: bool = False) -> tuple[Any, Any]:
        """``(values, indices)`` sorted along ``dim``; gradients flow through ``indices``."""
        indices = self.argsort(dim, descending)
        return self.gather(normalize_dim("sort", dim, len(self._primitive.shape)), indices), indices

    def sort(self, dim: int = -1, descending: bool = False) -> Self:
        return self.sort_with_indices(dim, descending)[0]

    @rank0_as_vector("dim")
    def topk_with_indices(self, k: int, dim: int = -1, largest: bool = True) -> tuple[Any, Any]:
        """The ``k`` largest values along ``dim``, largest first, with their indices
        (``largest=False``: the ``k`` smallest, smallest first)."""
        dim = normalize_dim("topk", dim, len(self._primitive.shape))
        n = self._primitive.shape[dim]
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= n:
            raise ValueRangeError(f"ember: topk: k must be an int in [0, {n}] for dim {dim}, got {k!r}")
        indices = self.argsort(dim, descending=bool(largest)).narrow(dim, 0, k)
        return self.gather(dim, indices), indices

    def topk(self, k: int, dim: int = -1, largest: bool = True) -> Self:
        return self.topk_with_indices(k, dim, largest)[0]


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
