# ruff: noqa: N803 -- torch.linalg's argument names (A, B, UPLO), so keyword calls port unchanged
"""Inverses, determinants and linear solves (``torch.linalg``'s names and signatures).

Each calls one LAPACK routine through ``Backend.linalg`` (numpy's on flex; on a GPU
device the operands go to the host and the results come back), batched over the
leading dims; autodiff's rules differentiate them (twice, too).
"""

from __future__ import annotations

from typing import NamedTuple

from ember.backend.ops import LinalgOp
from ember.errors import ShapeError, ValueRangeError
from ember.linalg._core import check_batch, check_matrix, check_operand, mt, run
from ember.tensor import Tensor


class InvEx(NamedTuple):
    inverse: Tensor
    info: Tensor


class SolveEx(NamedTuple):
    result: Tensor
    info: Tensor


class Slogdet(NamedTuple):
    sign: Tensor
    logabsdet: Tensor


class Lstsq(NamedTuple):
    solution: Tensor
    residuals: Tensor
    rank: Tensor
    singular_values: Tensor


def inv(A: Tensor) -> Tensor:
    """The inverse of each square matrix of ``A`` ``[..., n, n]``.

    Raises :class:`~ember.errors.LinAlgError` naming the batch element and the zero
    pivot when a matrix is singular (:func:`inv_ex` returns the info instead).

    >>> from ember import Device, Tensor, linalg
    >>> a = Tensor.from_data([[2.0, 0.0], [0.0, 4.0]], device=Device.flex())
    >>> linalg.inv(a).tolist()
    [[0.5, 0.0], [0.0, 0.25]]
    """
    return inv_ex(A, check_errors=True).inverse


def inv_ex(A: Tensor, *, check_errors: bool = False) -> InvEx:
    """``(inverse, info)``: ``info`` (int32, the batch shape) is 0 where the matrix was
    inverted, else the 1-based index of the zero pivot of its LU factorization (its
    inverse is then NaN). With ``check_errors`` a singular matrix raises, as :func:`inv`."""
    check_matrix("inv", A, square=True)
    out, info = run(LinalgOp.INV, (A,), (check_errors,))
    return InvEx(out, info)


def _vector_rhs(A: Tensor, B: Tensor) -> bool:
    """PyTorch's rule: ``B`` is a (batch of) vector(s) when it is rank 1, or has ``A``'s
    shape without its last dim."""
    return B.dims() == A.dims()[:-1] or len(B.dims()) == 1


def solve(A: Tensor, B: Tensor, *, left: bool = True) -> Tensor:
    """The solution ``X`` of ``A X = B`` (``X A = B`` when ``left=False``) for square
    ``A`` ``[..., n, n]`` and ``B`` ``[..., n, k]`` or ``[..., n]``; batch dims broadcast.

    Raises :class:`~ember.errors.LinAlgError` for a singular ``A`` (:func:`solve_ex`
    returns the info instead).

    >>> from ember import Device, Tensor, linalg
    >>> a = Tensor.from_data([[3.0, 1.0], [1.0, 2.0]], device=Device.flex())
    >>> b = Tensor.from_data([9.0, 8.0], device=Device.flex())
    >>> linalg.solve(a, b).tolist()
    [2.0, 3.0]
    """
    return solve_ex(A, B, left=left, check_errors=True).result


def solve_ex(A: Tensor, B: Tensor, *, left: bool = True, check_errors: bool = False) -> SolveEx:
    """``(result, info)`` of :func:`solve`; ``info`` as :func:`inv_ex`'s."""
    check_matrix("solve", A, square=True)
    check_operand("solve", A, B)
    vector = _vector_rhs(A, B)
    n = A.dims()[-1]
    rhs = B.unsqueeze_dim(len(B.dims()) if left else len(B.dims()) - 1) if vector else B
    if len(rhs.dims()) < 2 or rhs.dims()[-2 if left else -1] != n:
        raise ShapeError(
            f"ember: linalg.solve: A {A.dims()} and B {B.dims()} do not match: B must be "
            f"[..., {n}, k] or [..., {n}]" + ("" if left else " (left=False: [..., k, n])")
        )
    check_batch("solve", A, rhs)
    if left:
        x, info = run(LinalgOp.SOLVE, (A, rhs), (check_errors,))
    else:
        xt, info = run(LinalgOp.SOLVE, (mt(A), mt(rhs)), (check_errors,))
        x = mt(xt)
    if vector:
        x = x.squeeze_dim(-1 if left else -2)
    return SolveEx(x, info)


def solve_triangular(A: Tensor, B: Tensor, *, upper: bool, left: bool = True, unitriangular: bool = False) -> Tensor:
    """The solution of ``A X = B`` (``X A = B`` when ``left=False``) for triangular ``A``
    ``[..., n, n]`` (only its ``upper`` or lower triangle is read; with ``unitriangular``
    its diagonal is taken as ones) and ``B`` ``[..., n, k]``. A zero on the diagonal
    gives inf/NaN, as PyTorch's.

    >>> from ember import Device, Tensor, linalg
    >>> a = Tensor.from_data([[2.0, 1.0], [0.0, 4.0]], device=Device.flex())
    >>> b = Tensor.from_data([[4.0], [8.0]], device=Device.flex())
    >>> linalg.solve_triangular(a, b, upper=True).tolist()
    [[1.0], [2.0]]
    """
    check_matrix("solve_triangular", A, square=True)
    check_operand("solve_triangular", A, B)
    check_matrix("solve_triangular", B, name="B")
    n = A.dims()[-1]
    if B.dims()[-2 if left else -1] != n:
        raise ShapeError(
            f"ember: linalg.solve_triangular: A {A.dims()} and B {B.dims()} do not match: B must be "
            + (f"[..., {n}, k]" if left else f"[..., k, {n}] (left=False)")
        )
    check_batch("solve_triangular", A, B)
    if left:
        return run(LinalgOp.SOLVE_TRIANGULAR, (A, B), (upper, unitriangular))[0]
    return mt(run(LinalgOp.SOLVE_TRIANGULAR, (mt(A), mt(B)), (not upper, unitriangular))[0])


def det(A: Tensor) -> Tensor:
    """The determinant of each square matrix of ``A`` ``[..., n, n]``, shape ``[...]``.
    Its gradient is the adjugate's (conjugate) transpose, also at singular matrices (from
    the SVD).

    >>> from ember import Device, Tensor, linalg
    >>> linalg.det(Tensor.from_data([[1.0, 2.0], [3.0, 4.0]], device=Device.flex())).item()
    -2.0
    """
    check_matrix("det", A, square=True)
    return run(LinalgOp.DET, (A,))[0]


def slogdet(A: Tensor) -> Slogdet:
    """``(sign, logabsdet)`` of each square matrix: ``det = sign * exp(logabsdet)``, without
    overflow (a singular matrix gives sign 0 and ``-inf``); for a complex matrix the sign
    is complex (``det / |det|``) and ``logabsdet`` real. Differentiable in ``logabsdet``
    (and in a complex sign)."""
    check_matrix("slogdet", A, square=True)
    sign, logabs = run(LinalgOp.SLOGDET, (A,))
    return Slogdet(sign, logabs)


def lstsq(A: Tensor, B: Tensor, rcond: float | None = None, *, driver: str | None = None) -> Lstsq:
    """The least-squares solution of ``A X = B`` for ``A`` ``[..., m, n]`` and ``B``
    ``[..., m, k]`` (or ``[m]``), by LAPACK ``gelsd`` (SVD-based: rank-deficient systems
    get the minimum-norm solution). ``residuals`` (squared, ``[..., k]``) are given when
    ``m > n`` and every matrix has full rank (else empty; under ``ember.compile``
    whenever ``m > n``, see ``ember.linalg``); ``rank`` and
    ``singular_values`` as PyTorch's ``gelsd`` driver. The gradient (of the solution)
    assumes full rank.

    >>> from ember import Device, Tensor, linalg
    >>> a = Tensor.from_data([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], device=Device.flex())
    >>> b = Tensor.from_data([[1.0], [2.0], [3.0]], device=Device.flex())
    >>> [round(v, 4) for v in linalg.lstsq(a, b).solution.reshape([2]).tolist()]
    [1.0, 2.0]
    """
    if driver not in (None, "gelsd", "gelsy", "gelss", "gels"):
        raise ValueRangeError(
            f"ember: linalg.lstsq: driver must be None, 'gels', 'gelsy', 'gelsd' or 'gelss', got {driver!r}"
        )
    check_matrix("lstsq", A)
    check_operand("lstsq", A, B)
    vector = len(B.dims()) == 1
    rhs = B.unsqueeze_dim(1) if vector else B
    m = A.dims()[-2]
    if len(rhs.dims()) < 2 or rhs.dims()[-2] != m:
        raise ShapeError(f"ember: linalg.lstsq: A {A.dims()} and B {B.dims()} do not match: B must be [..., {m}, k]")
    check_batch("lstsq", A, rhs)
    x, residuals, rank, sv = run(LinalgOp.LSTSQ, (A, rhs), (rcond,))
    if vector:
        x = x.squeeze_dim(-1)
    return Lstsq(x, residuals, rank, sv)


def pinv(A: Tensor, *, atol: float | None = None, rtol: float | None = None, hermitian: bool = False) -> Tensor:
    """The Moore-Penrose pseudo-inverse ``[..., n, m]`` of ``A`` ``[..., m, n]`` from its
    SVD (its eigendecomposition when ``hermitian``); singular values below
    ``max(atol, rtol * s_max)`` are dropped, ``rtol`` defaulting to ``eps * max(m, n)``
    when neither is given (PyTorch's rule).

    >>> from ember import Device, Tensor, linalg
    >>> linalg.pinv(Tensor.from_data([[2.0, 0.0], [0.0, 0.0]], device=Device.flex())).tolist()
    [[0.5, 0.0], [0.0, 0.0]]
    """
    check_matrix("pinv", A, square=hermitian)
    return run(LinalgOp.PINV, (A,), (atol, rtol, hermitian))[0]


def matrix_exp(A: Tensor) -> Tensor:
    """The matrix exponential of each square matrix (scaling and squaring with a
    [13/13] Padé approximant, in float64 on the host).

    >>> from ember import Device, Tensor, linalg
    >>> linalg.matrix_exp(Tensor.from_data([[0.0, 0.0], [0.0, 0.0]], device=Device.flex())).tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    check_matrix("matrix_exp", A, square=True)
    return run(LinalgOp.MATRIX_EXP, (A,))[0]


def matrix_power(A: Tensor, n: int) -> Tensor:
    """``A`` to the integer power ``n`` by repeated squaring (``n < 0``: of its inverse;
    ``n = 0``: the identity).

    >>> from ember import Device, Tensor, linalg
    >>> linalg.matrix_power(Tensor.from_data([[1.0, 1.0], [0.0, 1.0]], device=Device.flex()), 3).tolist()
    [[1.0, 3.0], [0.0, 1.0]]
    """
    if not isinstance(n, int) or isinstance(n, bool):
        raise ValueRangeError(f"ember: linalg.matrix_power: n must be an int, got {n!r}")
    check_matrix("matrix_power", A, square=True)
    if n == 0:
        size = A.dims()[-1]
        eye = Tensor.eye(size, device=A._device, dtype=A.dtype)
        return eye.expand(A.dims())
    base = inv(A) if n < 0 else A
    n = abs(n)
    result = None
    while n:
        if n & 1:
            result = base if result is None else result.matmul(base)
        n >>= 1
        if n:
            base = base.matmul(base)
    assert result is not None
    return result
