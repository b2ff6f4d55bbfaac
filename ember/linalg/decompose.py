# ruff: noqa: N803 -- torch.linalg's argument names (A, B, UPLO), so keyword calls port unchanged
"""Matrix decompositions (``torch.linalg``'s names, signatures and named results).

Each is one LAPACK routine through ``Backend.linalg`` (numpy's on flex; on a GPU
device device -> host -> device), batched over the leading dims, with autodiff
rules (PyTorch's formulas; see ``ember.backend.autodiff.rules.decompositions``).
"""

from __future__ import annotations

from typing import NamedTuple

from ember.backend.ops import LinalgOp
from ember.errors import ValueRangeError
from ember.linalg._core import check_matrix, mh, run
from ember.tensor import Tensor


class CholeskyEx(NamedTuple):
    L: Tensor
    info: Tensor


class QR(NamedTuple):
    Q: Tensor
    R: Tensor


class SVD(NamedTuple):
    U: Tensor
    S: Tensor
    Vh: Tensor


class Eigh(NamedTuple):
    eigenvalues: Tensor
    eigenvectors: Tensor


def cholesky(A: Tensor, *, upper: bool = False) -> Tensor:
    """The Cholesky factor ``L`` (lower, ``A = L L^H``; ``upper=True``: ``U = L^H``) of
    each symmetric (complex: Hermitian) positive-definite matrix of ``A`` ``[..., n, n]``
    (its lower triangle is read). Raises :class:`~ember.errors.LinAlgError` naming the batch element and the
    leading minor that is not positive-definite (:func:`cholesky_ex` returns the info).

    >>> from ember import Device, Tensor, linalg
    >>> linalg.cholesky(Tensor.from_data([[4.0, 2.0], [2.0, 2.0]], device=Device.flex())).tolist()
    [[2.0, 0.0], [1.0, 1.0]]
    """
    return cholesky_ex(A, upper=upper, check_errors=True).L


def cholesky_ex(A: Tensor, *, upper: bool = False, check_errors: bool = False) -> CholeskyEx:
    """``(L, info)`` of :func:`cholesky`: ``info`` (int32, the batch shape) is 0, or the
    order of the first leading minor that is not positive-definite (``L`` is then NaN)."""
    check_matrix("cholesky", A, square=True)
    low, info = run(LinalgOp.CHOLESKY, (A,), (check_errors,))
    return CholeskyEx(mh(low) if upper else low, info)


def qr(A: Tensor, mode: str = "reduced") -> QR:
    """``(Q, R)`` with ``A = Q R``, ``Q`` orthonormal columns, ``R`` upper triangular
    (LAPACK ``geqrf``: the signs of PyTorch's and numpy's). ``mode``: ``"reduced"``
    (``Q`` ``[..., m, k]``, ``R`` ``[..., k, n]``, ``k = min(m, n)``), ``"complete"``
    (``Q`` ``[..., m, m]``) or ``"r"`` (``R`` only; ``Q`` empty). The gradient needs
    ``Q`` and ``m >= n``, as PyTorch's.

    >>> from ember import Device, Tensor, linalg
    >>> q, r = linalg.qr(Tensor.from_data([[3.0, 0.0], [4.0, 5.0]], device=Device.flex()))
    >>> [round(v, 4) for v in r.reshape([4]).tolist()]
    [-5.0, -4.0, 0.0, 3.0]
    """
    if mode not in ("reduced", "complete", "r"):
        raise ValueRangeError(f"ember: linalg.qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    check_matrix("qr", A)
    q, r = run(LinalgOp.QR, (A,), (mode,))
    return QR(q, r)


def svd(A: Tensor, full_matrices: bool = True) -> SVD:
    """``(U, S, Vh)`` with ``A = U diag(S) Vh``, ``S`` real and descending (LAPACK ``gesdd``, as
    PyTorch's CPU and numpy). ``full_matrices=False`` gives the reduced factors
    (``U`` ``[..., m, k]``, ``Vh`` ``[..., k, n]``). The gradient is PyTorch's
    gauge-invariant formula: defined for distinct singular values (and, for ``U`` or
    ``Vh`` of a non-square matrix, nonzero ones).

    >>> from ember import Device, Tensor, linalg
    >>> linalg.svd(Tensor.from_data([[3.0, 0.0], [0.0, -2.0]], device=Device.flex())).S.tolist()
    [3.0, 2.0]
    """
    check_matrix("svd", A)
    u, s, vh = run(LinalgOp.SVD, (A,), (full_matrices,))
    return SVD(u, s, vh)


def svdvals(A: Tensor) -> Tensor:
    """The singular values ``[..., min(m, n)]`` of each matrix, descending (no vectors
    computed; the gradient computes them)."""
    check_matrix("svdvals", A)
    return run(LinalgOp.SVDVALS, (A,))[0]


def _uplo(op: str, UPLO: str) -> str:
    if UPLO not in ("L", "U"):
        raise ValueRangeError(f"ember: linalg.{op}: UPLO must be 'L' or 'U', got {UPLO!r}")
    return UPLO


def eigh(A: Tensor, UPLO: str = "L") -> Eigh:
    """``(eigenvalues, eigenvectors)`` of each symmetric (complex: Hermitian) matrix of
    ``A`` ``[..., n, n]`` (only its ``UPLO`` triangle is read): eigenvalues real and
    ascending, eigenvectors as columns. The gradient assumes distinct eigenvalues (and,
    for complex vectors, a loss invariant to their phases).

    >>> from ember import Device, Tensor, linalg
    >>> linalg.eigh(Tensor.from_data([[2.0, 1.0], [1.0, 2.0]], device=Device.flex())).eigenvalues.tolist()
    [1.0, 3.0]
    """
    check_matrix("eigh", A, square=True)
    w, v = run(LinalgOp.EIGH, (A,), (_uplo("eigh", UPLO),))
    return Eigh(w, v)


def eigvalsh(A: Tensor, UPLO: str = "L") -> Tensor:
    """The eigenvalues (real, ascending) of each symmetric (complex: Hermitian) matrix
    (its ``UPLO`` triangle read)."""
    check_matrix("eigvalsh", A, square=True)
    return run(LinalgOp.EIGVALSH, (A,), (_uplo("eigvalsh", UPLO),))[0]
