"""The matrix decompositions and solves of :class:`~ember.backend.ops.LinalgOp` on
numpy arrays: numpy's LAPACK (``numpy.linalg``), batched over leading dims.

``HOST[op](*arrays, *options)`` returns a tuple of arrays. Flex calls these on its own
arrays; every other backend's default (:meth:`ember.backend.base.Backend.linalg`)
copies its operands to the host, calls them and copies the results back.

The fast path of each kernel is one numpy call. Only when LAPACK reports a failure
(numpy's ``LinAlgError``, for the whole batch) is the batch walked element by element
to find which matrix failed and where (the first zero pivot of an LU with partial
pivoting, or the first leading minor of a Cholesky that is not positive), as
``torch.linalg``'s ``info``; then a ``check`` kernel raises
:class:`~ember.errors.LinAlgError` naming both, and an unchecked one (the ``*_ex``
functions) fills the failed elements with NaN and returns the info. The iterative
decompositions (SVD, the symmetric eigensolver, least squares and those built on them)
raise :class:`~ember.errors.LinAlgError` when LAPACK does not converge, naming the
first matrix holding an inf or a NaN (the usual cause), as ``torch.linalg`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any, Literal

import numpy as np

from ember.backend.ops import LinalgOp
from ember.errors import LinAlgError

Arrays = tuple[np.ndarray, ...]


def _ok(a: np.ndarray) -> np.ndarray:
    return np.zeros(a.shape[:-2], np.int32)


def _which(flat: int, batch: tuple[int, ...]) -> str:
    """``the matrix`` (one matrix) or ``the matrix at batch index ...``."""
    if len(batch) <= 1:
        return f"the matrix at batch index {flat}" if batch else "the matrix"
    return f"the matrix at batch index {flat} (index {[int(i) for i in np.unravel_index(flat, batch)]})"


def _first_failure(info: np.ndarray) -> tuple[int, int]:
    flat = info.reshape(-1)
    index = int(np.flatnonzero(flat)[0])
    return index, int(flat[index])


def lu_zero_pivot(m: np.ndarray) -> int:
    """The 1-based column of the first zero pivot of ``m``'s LU with partial pivoting
    (LAPACK ``getrf``'s ``info``), or 0 when there is none."""
    u = np.array(m, dtype=np.result_type(m, np.float64))
    n = u.shape[0]
    first = 0
    for k in range(n):
        p = k + int(np.argmax(np.abs(u[k:, k])))
        if u[p, k] == 0 or not np.isfinite(u[p, k]):
            first = first or k + 1
            continue
        if p != k:
            u[[k, p]] = u[[p, k]]
        u[k + 1 :, k:] -= np.outer(u[k + 1 :, k] / u[k, k], u[k, k:])
    return first


def cholesky_failed_minor(m: np.ndarray) -> int:
    """The order of the first leading minor of symmetric (Hermitian) ``m`` (lower
    triangle read) that is not positive-definite (LAPACK ``potrf``'s ``info``), or 0."""
    a = np.tril(np.array(m, dtype=np.result_type(m, np.float64)))
    n = a.shape[0]
    low = np.zeros_like(a)
    for k in range(n):
        d = (a[k, k] - low[k, :k] @ low[k, :k].conj()).real
        if not d > 0:  # also NaN
            return k + 1
        low[k, k] = np.sqrt(d)
        low[k + 1 :, k] = (a[k + 1 :, k] - low[k + 1 :, :k] @ low[k, :k].conj()) / low[k, k]
    return 0


def _singular(op: str, a: np.ndarray, check: bool) -> np.ndarray:
    """The info of a batch LAPACK called singular; raises when ``check``."""
    flat = a.reshape((-1,) + a.shape[-2:])
    info: np.ndarray = np.zeros(flat.shape[0], np.int32)
    for i, m in enumerate(flat):
        try:
            np.linalg.inv(m)
        except np.linalg.LinAlgError:
            info[i] = lu_zero_pivot(m) or m.shape[-1]
    info = info.reshape(a.shape[:-2])
    if check and info.any():
        index, pivot = _first_failure(info)
        raise LinAlgError(
            f"ember: linalg.{op}: {_which(index, a.shape[:-2])} is singular "
            f"(pivot {pivot} of its LU factorization is zero), so it has no inverse; "
            f"use linalg.lstsq or linalg.pinv for a least-squares answer, or linalg.{op}_ex "
            "to get the info tensor instead of this error"
        )
    return info


def _not_converged(op: str, a: np.ndarray) -> LinAlgError:
    """The error for LAPACK not converging on ``a``: names the first matrix holding an
    inf or a NaN, or says the matrix is too ill-conditioned."""
    flat = a.reshape((-1,) + a.shape[-2:])
    bad = np.flatnonzero(~np.isfinite(flat).all(axis=(-2, -1)))
    if bad.size:
        cause = f"{_which(int(bad[0]), a.shape[:-2])} holds non-finite values (inf or NaN)"
        fix = "replace them first (e.g. with .nan_to_num())"
    else:
        cause = "the input is too ill-conditioned (or has too many repeated values) for LAPACK's iteration"
        fix = "rescale or regularize it (e.g. add a small multiple of the identity), or compute in float64"
    return LinAlgError(f"ember: linalg.{op}: the algorithm did not converge: {cause}; {fix}")


def _converging(op: str, fn: Callable[..., Arrays]) -> Callable[..., Arrays]:
    """``fn`` with numpy's non-convergence error turned into :func:`_not_converged`'s."""

    def call(a: np.ndarray, *rest: Any) -> Arrays:
        try:
            return fn(a, *rest)
        except np.linalg.LinAlgError:
            raise _not_converged(op, a) from None

    call.__doc__, call.__name__ = fn.__doc__, fn.__name__
    return call


def inv(a: np.ndarray, check: bool) -> Arrays:
    try:
        return np.linalg.inv(a), _ok(a)
    except np.linalg.LinAlgError:
        info = _singular("inv", a, check)
    out = np.full(a.shape, np.nan, a.dtype)
    good = info == 0
    out[good] = np.linalg.inv(a[good])
    return out, info


def solve(a: np.ndarray, b: np.ndarray, check: bool) -> Arrays:
    try:
        x = np.linalg.solve(a, b)
        return x, np.zeros(x.shape[:-2], np.int32)
    except np.linalg.LinAlgError:
        info = _singular("solve", a, check)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    info = np.broadcast_to(info, batch).copy()
    out = np.full(batch + b.shape[-2:], np.nan, np.result_type(a, b))
    good = info == 0
    out[good] = np.linalg.solve(a[good], b[good])
    return out, info


def _substitute(a: np.ndarray, b: np.ndarray, upper: bool) -> np.ndarray:
    """Row-by-row substitution (for triangular systems LAPACK refuses: zero diagonal)."""
    n = a.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    x = np.zeros(batch + b.shape[-2:], np.result_type(a, b))
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in range(n - 1, -1, -1) if upper else range(n):
            rest = a[..., i : i + 1, :] @ x
            x[..., i, :] = (b[..., i, :] - rest[..., 0, :]) / a[..., i, i : i + 1]
    return x


def solve_triangular(a: np.ndarray, b: np.ndarray, upper: bool, unitriangular: bool) -> Arrays:
    a = np.triu(a) if upper else np.tril(a)
    if unitriangular:
        n = a.shape[-1]
        a = a.copy()
        a[..., range(n), range(n)] = 1
    try:
        return (np.linalg.solve(a, b),)
    except np.linalg.LinAlgError:
        return (_substitute(a, b, upper),)


def det(a: np.ndarray) -> Arrays:
    return (np.asarray(np.linalg.det(a)),)  # numpy gives a scalar for one matrix


def slogdet(a: np.ndarray) -> Arrays:
    sign, logabs = np.linalg.slogdet(a)
    return np.asarray(sign), np.asarray(logabs)


@cache
def _potrf(dtype: np.dtype) -> Any:
    """scipy's LAPACK ``potrf`` for ``dtype`` when scipy is installed (the ``fft`` extra
    brings it), else ``None``: numpy's bundled LAPACK factors a single matrix 1.4-1.8x
    slower (``benchmarks/ops.py linalg``)."""
    try:
        from scipy.linalg import get_lapack_funcs
    except ImportError:
        return None
    return get_lapack_funcs(("potrf",), dtype=dtype)[0]


def cholesky(a: np.ndarray, check: bool) -> Arrays:
    potrf = _potrf(a.dtype) if a.ndim == 2 and a.shape[0] >= 32 else None
    if potrf is not None:  # one matrix: scipy's potrf (lower, upper triangle zeroed)
        factor, info = potrf(a, lower=1, clean=1, overwrite_a=0)
        if info == 0:
            return factor, _ok(a)
    else:
        try:
            return np.linalg.cholesky(a), _ok(a)
        except np.linalg.LinAlgError:
            pass
    flat = a.reshape((-1,) + a.shape[-2:])
    info = np.array([cholesky_failed_minor(m) for m in flat], np.int32).reshape(a.shape[:-2])
    if not info.any():  # LAPACK failed where the float64 check passed: report the last minor
        info[...] = a.shape[-1]
    if check:
        index, minor = _first_failure(info)
        raise LinAlgError(
            f"ember: linalg.cholesky: {_which(index, a.shape[:-2])} is not "
            f"positive-definite (its leading minor of order {minor} is not); pass a symmetric (complex: Hermitian) "
            "positive-definite matrix (add a multiple of the identity to regularize it), or use "
            "linalg.cholesky_ex to get the info tensor instead of this error"
        )
    out = np.full(a.shape, np.nan, a.dtype)
    good = info == 0
    out[good] = np.linalg.cholesky(a[good])
    return out, info


def qr(a: np.ndarray, mode: Literal["reduced", "complete", "r"]) -> Arrays:
    if mode == "r":
        r: Any = np.linalg.qr(a, mode="r")
        return np.zeros((0,), a.dtype), r
    q, r = np.linalg.qr(a, mode=mode)
    return q, r


def svd(a: np.ndarray, full_matrices: bool) -> Arrays:
    u, s, vh = np.linalg.svd(a, full_matrices=full_matrices)
    return u, s, vh


def svdvals(a: np.ndarray) -> Arrays:
    return (np.linalg.svd(a, compute_uv=False),)


def eigh(a: np.ndarray, uplo: Literal["L", "U"]) -> Arrays:
    w, v = np.linalg.eigh(a, UPLO=uplo)
    return w, v


def eigvalsh(a: np.ndarray, uplo: Literal["L", "U"]) -> Arrays:
    return (np.linalg.eigvalsh(a, UPLO=uplo),)


def _real(dtype: Any) -> np.dtype:
    """The real dtype of ``dtype`` (``float32`` for ``complex64``)."""
    return np.zeros((), dtype).real.dtype


def _h(a: np.ndarray) -> np.ndarray:
    """The conjugate transpose of each matrix."""
    return np.swapaxes(a, -1, -2).conj()


def lstsq(a: np.ndarray, b: np.ndarray, rcond: float | None, static_residuals: bool = False) -> Arrays:
    """LAPACK ``gelsd`` per batch element (numpy's ``lstsq`` is not batched).

    The residuals are ``[..., k]`` when ``m > n`` and every matrix has full rank, else
    empty (PyTorch's rule). With ``static_residuals`` (compiled code, whose shapes may
    not depend on values) they are ``[..., k]`` whenever ``m > n``, the squared norms of
    ``B - A X`` also for rank-deficient matrices (JAX's rule under ``jit``)."""
    m, n = a.shape[-2:]
    if not (np.isfinite(a).all() and np.isfinite(b).all()):  # LAPACK would print to stderr, then fail
        raise _not_converged("lstsq", a if not np.isfinite(a).all() else b)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:]).reshape((-1, m, n))
    b = np.broadcast_to(b, batch + b.shape[-2:]).reshape((-1, m, b.shape[-1]))
    dtype = np.result_type(a, b)
    real = _real(dtype)
    x = np.zeros((a.shape[0], n, b.shape[-1]), dtype)
    res = np.zeros((a.shape[0], b.shape[-1]), real)
    rank = np.zeros(a.shape[0], np.int64)
    sv = np.zeros((a.shape[0], min(m, n)), real)
    full = m > n
    for i in range(a.shape[0]):
        x[i], r, rank[i], sv[i] = np.linalg.lstsq(a[i], b[i], rcond=rcond)
        full = full and rank[i] == n
        if r.size:
            res[i] = r
    k = b.shape[-1]
    if static_residuals and m > n and not full:
        res = (np.abs(b - a @ x) ** 2).sum(-2).astype(real)
        full = True
    residuals = res.reshape(batch + (k,)) if full else np.zeros((0,), real)
    return x.reshape(batch + (n, k)), residuals, rank.reshape(batch), sv.reshape(batch + (min(m, n),))


def pinv(a: np.ndarray, atol: float | None, rtol: float | None, hermitian: bool) -> Arrays:
    """``torch.linalg.pinv``'s cut-off: singular values below ``max(atol, rtol * s_max)``
    are dropped; ``rtol`` defaults to ``eps * max(m, n)`` when neither is given, else 0."""
    m, n = a.shape[-2:]
    if rtol is None:
        rtol = float(np.finfo(a.dtype).eps) * max(m, n) if atol is None else 0.0
    if hermitian:
        w, v = np.linalg.eigh(a)
        s = np.abs(w)
        u, vh = v * np.sign(w)[..., None, :], _h(v)
    else:
        u, s, vh = np.linalg.svd(a, full_matrices=False)
    if s.shape[-1] == 0:
        return (np.zeros(a.shape[:-2] + (n, m), a.dtype),)
    cutoff = np.maximum(atol or 0.0, rtol * np.max(s, axis=-1, keepdims=True))
    with np.errstate(divide="ignore"):
        s_inv = np.where(s > cutoff, 1.0 / s, 0.0).astype(s.dtype)
    return ((_h(vh) * s_inv[..., None, :]) @ _h(u),)


_PADE13 = (
    64764752532480000.0,
    32382376266240000.0,
    7771770303897600.0,
    1187353796428800.0,
    129060195264000.0,
    10559470521600.0,
    670442572800.0,
    33522128640.0,
    1323241920.0,
    40840800.0,
    960960.0,
    16380.0,
    182.0,
    1.0,
)


def matrix_exp(a: np.ndarray) -> Arrays:
    """Scaling and squaring with the [13/13] Padé approximant (Higham 2005), in float64
    (complex128 for a complex matrix)."""
    x = np.asarray(a, np.result_type(a, np.float64))
    n = x.shape[-1]
    if x.size == 0:
        return (np.zeros(a.shape, a.dtype),)
    norm = np.abs(x).sum(axis=-2).max(axis=-1)  # the 1-norm of each matrix
    with np.errstate(divide="ignore"):
        s = np.maximum(0, np.ceil(np.log2(norm / 5.371920351148152))).astype(np.int64)
    x = x / (2.0**s)[..., None, None]
    b = _PADE13
    eye = np.eye(n)
    x2 = x @ x
    x4 = x2 @ x2
    x6 = x4 @ x2
    u = x @ (x6 @ (b[13] * x6 + b[11] * x4 + b[9] * x2) + b[7] * x6 + b[5] * x4 + b[3] * x2 + b[1] * eye)
    v = x6 @ (b[12] * x6 + b[10] * x4 + b[8] * x2) + b[6] * x6 + b[4] * x4 + b[2] * x2 + b[0] * eye
    r = np.linalg.solve(v - u, v + u)
    for step in range(int(s.max(initial=0))):
        more = (s > step)[..., None, None]
        r = np.where(more, r @ r, r)
    return (r.astype(a.dtype),)


HOST: dict[LinalgOp, Callable[..., Arrays]] = {
    LinalgOp.INV: inv,
    LinalgOp.SOLVE: solve,
    LinalgOp.SOLVE_TRIANGULAR: solve_triangular,
    LinalgOp.DET: det,
    LinalgOp.SLOGDET: slogdet,
    LinalgOp.CHOLESKY: cholesky,
    LinalgOp.QR: qr,
    LinalgOp.SVD: _converging("svd", svd),
    LinalgOp.SVDVALS: _converging("svdvals", svdvals),
    LinalgOp.EIGH: _converging("eigh", eigh),
    LinalgOp.EIGVALSH: _converging("eigvalsh", eigvalsh),
    LinalgOp.LSTSQ: _converging("lstsq", lstsq),
    LinalgOp.PINV: _converging("pinv", pinv),
    LinalgOp.MATRIX_EXP: matrix_exp,
}


def run(op: LinalgOp, inputs: tuple[Any, ...], options: tuple[Any, ...]) -> Arrays:
    """``HOST[op]`` on numpy arrays."""
    return HOST[op](*inputs, *options)
