"""``ember.linalg``: PyTorch's ``torch.linalg`` for ember tensors (float32, float64,
complex64 and complex128).

Inverses, solves, determinants and the decompositions (``inv``, ``solve``,
``solve_triangular``, ``det``, ``slogdet``, ``cholesky``, ``qr``, ``svd``, ``svdvals``,
``eigh``, ``eigvalsh``, ``lstsq``, ``pinv``, ``matrix_exp``) are one LAPACK call each,
through the backend protocol's ``linalg`` op: numpy's LAPACK on flex's arrays, and on a
GPU device a copy to the host and back (documented on each backend). All are batched
over leading dims and differentiable (twice, too) with PyTorch's gradient formulas; a
complex matrix gets PyTorch's results (Hermitian where torch reads it so; singular values,
eigenvalues and norms real) and gradients (``dL/dRe + i dL/dIm`` of a real loss).
The norms, ``matrix_rank``, ``matrix_power`` and ``cross`` are composites.
On a fusion device and under ``ember.compile`` each LAPACK call is one node of the graph,
which the plan runs as a call of the wrapped backend (so a singular matrix raises when
the plan runs); there ``lstsq``'s residuals are ``[..., k]`` whenever ``m > n`` (the
squared residual norms, also of rank-deficient systems), so that its shapes do not
depend on the ranks it finds.

>>> from ember import Device, Tensor, linalg
>>> a = Tensor.from_data([[4.0, 2.0], [2.0, 3.0]], device=Device.flex())
>>> linalg.det(a).item()
8.0
"""

from ember.errors import LinAlgError
from ember.linalg.decompose import (
    QR,
    SVD,
    CholeskyEx,
    Eigh,
    cholesky,
    cholesky_ex,
    eigh,
    eigvalsh,
    qr,
    svd,
    svdvals,
)
from ember.linalg.norms import cross, matrix_norm, matrix_rank, norm, vector_norm
from ember.linalg.solve import (
    InvEx,
    Lstsq,
    Slogdet,
    SolveEx,
    det,
    inv,
    inv_ex,
    lstsq,
    matrix_exp,
    matrix_power,
    pinv,
    slogdet,
    solve,
    solve_ex,
    solve_triangular,
)

__all__ = [
    "QR",
    "SVD",
    "CholeskyEx",
    "Eigh",
    "InvEx",
    "LinAlgError",
    "Lstsq",
    "Slogdet",
    "SolveEx",
    "cholesky",
    "cholesky_ex",
    "cross",
    "det",
    "eigh",
    "eigvalsh",
    "inv",
    "inv_ex",
    "lstsq",
    "matrix_exp",
    "matrix_norm",
    "matrix_power",
    "matrix_rank",
    "norm",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "solve_ex",
    "solve_triangular",
    "svd",
    "svdvals",
    "vector_norm",
]
