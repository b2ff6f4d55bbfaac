# ruff: noqa: N803 -- torch.linalg's argument names (A, B, UPLO), so keyword calls port unchanged
"""Norms, rank and the cross product (``torch.linalg``'s), written over tensor ops and
the singular values, so autodiff differentiates them with no rule of their own."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.errors import DTypeError, ShapeError, ValueRangeError
from ember.linalg._core import check_matrix, check_operand
from ember.linalg.decompose import svdvals
from ember.tensor import Tensor
from ember.tensor.shape import normalize_dim

_INF = math.inf


def _dims(op: str, x: Tensor, dim: int | Sequence[int] | None) -> list[int]:
    rank = len(x.dims())
    if dim is None:
        return list(range(rank))
    dims = [dim] if isinstance(dim, int) else list(dim)
    out = [normalize_dim(f"linalg.{op}", d, rank) for d in dims]
    if len(set(out)) != len(out):
        raise ShapeError(f"ember: linalg.{op}: dim {dim} names a dim twice")
    return out


def _to_end(x: Tensor, dims: list[int]) -> Tensor:
    """``x`` with ``dims`` moved to the end (in that order)."""
    rest = [d for d in range(len(x.dims())) if d not in dims]
    order = rest + dims
    return x if order == list(range(len(order))) else x.permute(order)


def _finish(out: Tensor, x: Tensor, dims: list[int], keepdim: bool) -> Tensor:
    """``out`` (the reduction, with the reduced dims gone) shaped as PyTorch's result."""
    shape = x.dims()
    if keepdim:
        return out.reshape([1 if d in dims else n for d, n in enumerate(shape)])
    return out.reshape([n for d, n in enumerate(shape) if d not in dims])


def vector_norm(x: Tensor, ord: float = 2, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """The ``ord``-norm of ``x`` over ``dim`` (all dims when ``None``): ``(sum |x|^ord)^(1/ord)``;
    ``inf``/``-inf`` the largest/smallest magnitude, ``0`` the count of nonzeros. A
    complex ``x`` gives the real norm of its magnitudes (as PyTorch).

    >>> from ember import Device, Tensor, linalg
    >>> linalg.vector_norm(Tensor.from_data([3.0, 4.0], device=Device.flex())).item()
    5.0
    """
    if not isinstance(x, Tensor) or not (x.dtype.is_float or x.dtype.is_complex):
        raise DTypeError("ember: linalg.vector_norm: x must be a float or complex tensor; cast it with .float()")
    dims = _dims("vector_norm", x, dim)
    if x.dtype.is_complex:
        x = x.abs()
    moved = _to_end(x, dims)
    keep = moved.dims()[: len(moved.dims()) - len(dims)]
    flat = moved.reshape(keep + [-1] if dims else keep + [1])
    return _finish(flat.norm(float(ord), dim=len(keep)), x, dims, keepdim)


_MATRIX_ORDS = ("fro", "nuc", 1, -1, 2, -2, _INF, -_INF)


def matrix_norm(A: Tensor, ord: str | float = "fro", dim: tuple[int, int] = (-2, -1), keepdim: bool = False) -> Tensor:
    """A matrix norm over the two dims ``dim``: ``"fro"`` (Frobenius), ``"nuc"`` (sum of
    singular values), ``2``/``-2`` (largest/smallest singular value), ``1``/``-1``
    (max/min column sum of ``|A|``), ``inf``/``-inf`` (max/min row sum). Complex
    matrices take every ``ord`` (the norms are real).

    >>> from ember import Device, Tensor, linalg
    >>> a = Tensor.from_data([[1.0, -2.0], [3.0, 4.0]], device=Device.flex())
    >>> linalg.matrix_norm(a, 1).item(), linalg.matrix_norm(a, float("inf")).item()
    (6.0, 7.0)
    """
    if ord not in _MATRIX_ORDS:
        raise ValueRangeError(
            f"ember: linalg.matrix_norm: ord must be one of 'fro', 'nuc', 1, -1, 2, -2, inf, -inf; got {ord!r}"
        )
    if not isinstance(A, Tensor) or len(A.dims()) < 2:
        check_matrix("matrix_norm", A)
    dims = _dims("matrix_norm", A, dim)
    if len(dims) != 2:
        raise ShapeError(f"ember: linalg.matrix_norm: dim must name two dims, got {dim}")
    if ord == "fro":
        return vector_norm(A, 2, dims, keepdim)
    if A.dtype.is_complex and ord not in ("nuc", 2, -2):
        A = A.abs()  # noqa: N806 -- torch.linalg's argument name
    check_matrix("matrix_norm", A)
    moved = _to_end(A, dims)
    last = len(moved.dims()) - 1
    if ord in ("nuc", 2, -2):
        s = svdvals(moved)
        if ord == "nuc":
            out = s.sum_dim(last - 1)
        elif ord == 2:
            out = s.max_dim(last - 1)
        else:
            out = s.min_dim(last - 1)
    else:
        along = last - 1 if ord in (1, -1) else last  # column sums for 1, row sums for inf
        sums = moved.abs().sum_dim(along).squeeze_dim(along)
        out = sums.max_dim(last - 1) if ord in (1, _INF) else sums.min_dim(last - 1)
    return _finish(out, A, dims, keepdim)


def norm(A: Tensor, ord: Any = None, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """PyTorch's ``linalg.norm``: a matrix norm when ``ord`` is a string or ``dim`` names two
    dims (or ``ord`` is given for a matrix without ``dim``), else a vector norm (the
    2-norm of all elements when both are ``None``)."""
    if isinstance(ord, str) or (dim is not None and not isinstance(dim, int) and len(dim) == 2):
        return matrix_norm(A, "fro" if ord is None else ord, tuple(dim) if dim is not None else (-2, -1), keepdim)  # type: ignore[arg-type]
    if ord is not None and dim is None:
        if len(A.dims()) == 2:
            return matrix_norm(A, ord, (-2, -1), keepdim)
        if len(A.dims()) != 1:
            raise ShapeError(
                f"ember: linalg.norm: ord={ord!r} without dim needs a vector or a matrix, got shape "
                f"{A.dims()}; pass dim (one dim for a vector norm, two for a matrix norm)"
            )
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim)


def matrix_rank(A: Tensor, *, atol: float | None = None, rtol: float | None = None, hermitian: bool = False) -> Tensor:
    """The number (int64) of singular values of each matrix above
    ``max(atol, rtol * s_max)``; ``rtol`` defaults to ``eps * max(m, n)`` when neither is
    given (PyTorch's rule)."""
    check_matrix("matrix_rank", A, square=hermitian)
    m, n = A.dims()[-2:]
    if rtol is None:
        rtol = float(np.finfo(A.dtype.np).eps) * max(m, n) if atol is None else 0.0
    s = svdvals(A.detach())
    last = len(s.dims()) - 1
    if s.dims()[-1] == 0:
        return Tensor.zeros(A.dims()[:-2], device=A._device, dtype="int64")
    top = s.max_dim(last)
    tol = top.mul_scalar(rtol).clamp_min(atol or 0.0)
    return s.greater(tol).int().sum_dim(last).squeeze_dim(last)


def cross(input: Tensor, other: Tensor, *, dim: int = -1) -> Tensor:
    """The cross product of 3-vectors (float or complex) along ``dim``; the other dims
    broadcast.

    >>> from ember import Device, Tensor, linalg
    >>> x = Tensor.from_data([1.0, 0.0, 0.0], device=Device.flex())
    >>> y = Tensor.from_data([0.0, 1.0, 0.0], device=Device.flex())
    >>> linalg.cross(x, y).tolist()
    [0.0, 0.0, 1.0]
    """
    if not isinstance(input, Tensor) or not (input.dtype.is_float or input.dtype.is_complex):
        raise DTypeError("ember: linalg.cross: input must be a float or complex tensor; cast it with .float()")
    check_operand("cross", input, other, name="other")
    if len(input.dims()) != len(other.dims()):
        raise ShapeError(
            f"ember: linalg.cross: the operands must have the same rank (as PyTorch's), got shapes "
            f"{input.dims()} and {other.dims()}; unsqueeze the smaller one"
        )
    try:
        shape = list(np.broadcast_shapes(tuple(input.dims()), tuple(other.dims())))
    except ValueError:
        raise ShapeError(f"ember: linalg.cross: shapes {input.dims()} and {other.dims()} do not broadcast") from None
    d = normalize_dim("linalg.cross", dim, len(shape))
    if shape[d] != 3 or input.dims()[d - len(shape)] != 3 or other.dims()[d - len(shape)] != 3:
        raise ShapeError(
            f"ember: linalg.cross: dim {dim} must have size 3 in both operands, got {input.dims()} and {other.dims()}"
        )
    a = input if input.dims() == shape else input.expand(shape)
    b = other if other.dims() == shape else other.expand(shape)
    return a.cross(b, d)
