"""The ``ember.linalg`` cases shared by the tests: ``name -> (ember fn, torch fn, arrays)``.

Each fn maps its inputs to one tensor; a result that is unique only up to signs (the
vectors of ``svd`` and ``eigh``) enters through a gauge-invariant product, as in
PyTorch's own gradient tests. Symmetric inputs are symmetrized inside the fn, so
finite differences see the function PyTorch differentiates.
"""

from __future__ import annotations

import numpy as np

from ember import Tensor, linalg

INF = float("inf")


def _sym(x):
    return x.add(x.swap_dims(-1, -2)).mul_scalar(0.5)


def _tsym(x):
    return (x + x.mT) / 2


def _spd(x):
    return _sym(x).add(Tensor.eye(x.dims()[-1], device=x._device, dtype=x.dtype).mul_scalar(3.0))


def _tspd(torch, x):
    return _tsym(x) + 3.0 * torch.eye(x.shape[-1], dtype=x.dtype)


def _weights(k):
    return np.arange(1.0, k + 1.0)


def _flat_cat(parts):
    return Tensor.cat([p.reshape([-1]) for p in parts], 0)


def _tflat_cat(torch, parts):
    return torch.cat([p.reshape(-1) for p in parts])


def _gauge_svd(x, full=False):
    u, s, vh = linalg.svd(x, full_matrices=full)
    k = s.dims()[-1]
    c = Tensor.from_data(_weights(k).astype(x.to_numpy().dtype), device=x._device)
    u, vh = u.narrow(-1, 0, k), vh.narrow(-2, 0, k)
    return _flat_cat([u.mul(c).matmul(vh), s])


def _tgauge_svd(torch, x, full=False):
    u, s, vh = torch.linalg.svd(x, full_matrices=full)
    k = s.shape[-1]
    c = torch.tensor(_weights(k), dtype=x.dtype)
    return _tflat_cat(torch, [(u[..., :k] * c) @ vh[..., :k, :], s])


def _gauge_eigh(x):
    w, v = linalg.eigh(_sym(x))
    c = Tensor.from_data(_weights(w.dims()[-1]).astype(x.to_numpy().dtype), device=x._device)
    return _flat_cat([w, v.mul(c).matmul(v.swap_dims(-1, -2))])


def _tgauge_eigh(torch, x):
    w, v = torch.linalg.eigh(_tsym(x))
    c = torch.tensor(_weights(w.shape[-1]), dtype=x.dtype)
    return _tflat_cat(torch, [w, (v * c) @ v.mT])


def _arrays(seed, *shapes, shift=0.0, scale=1.0):
    rng = np.random.default_rng(seed)
    out = []
    for shape in shapes:
        a = rng.uniform(-1.0, 1.0, size=shape) * scale
        if shift and len(shape) >= 2 and shape[-1] == shape[-2]:
            a = a + shift * np.eye(shape[-1])
        out.append(a)
    return out


def _triangular(seed, shape, upper):
    (a,) = _arrays(seed, shape)
    a = np.triu(a) if upper else np.tril(a)
    return a + 2.0 * np.eye(shape[-1]) * np.sign(np.diagonal(a, axis1=-2, axis2=-1))[..., None, :]


CASES = {
    "inv": (linalg.inv, lambda t, a: t.linalg.inv(a), _arrays(1, (2, 3, 3), shift=3.0)),
    "det": (linalg.det, lambda t, a: t.linalg.det(a), _arrays(2, (2, 3, 3), shift=1.0)),
    "det_singular": (
        linalg.det,
        lambda t, a: t.linalg.det(a),
        [
            np.array(
                [
                    [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.5, 1.0, 2.0]],
                    [[1.0, 2.0, 0.0], [2.0, 4.0, 0.0], [0.0, 0.0, 1.0]],
                ]
            )
        ],
    ),
    "slogdet": (
        lambda a: linalg.slogdet(a).logabsdet,
        lambda t, a: t.linalg.slogdet(a).logabsdet,
        _arrays(3, (2, 3, 3), shift=1.0),
    ),
    "solve": (linalg.solve, lambda t, a, b: t.linalg.solve(a, b), _arrays(4, (2, 3, 3), (3, 2), shift=3.0)),
    "solve_vector": (linalg.solve, lambda t, a, b: t.linalg.solve(a, b), _arrays(5, (3, 3), (3,), shift=3.0)),
    "solve_right": (
        lambda a, b: linalg.solve(a, b, left=False),
        lambda t, a, b: t.linalg.solve(a, b, left=False),
        _arrays(6, (2, 3, 3), (2, 4, 3), shift=3.0),
    ),
    "solve_triangular_upper": (
        lambda a, b: linalg.solve_triangular(a, b, upper=True),
        lambda t, a, b: t.linalg.solve_triangular(a, b, upper=True),
        [_triangular(7, (2, 3, 3), True), *_arrays(8, (2, 3, 2))],
    ),
    "solve_triangular_lower_right_unit": (
        lambda a, b: linalg.solve_triangular(a, b, upper=False, left=False, unitriangular=True),
        lambda t, a, b: t.linalg.solve_triangular(a, b, upper=False, left=False, unitriangular=True),
        [*_arrays(9, (2, 3, 3)), *_arrays(10, (1, 2, 3))],
    ),
    "cholesky": (
        lambda a: linalg.cholesky(_spd(a)),
        lambda t, a: t.linalg.cholesky(_tspd(t, a)),
        _arrays(11, (2, 3, 3)),
    ),
    "cholesky_upper": (
        lambda a: linalg.cholesky(_spd(a), upper=True),
        lambda t, a: t.linalg.cholesky(_tspd(t, a), upper=True),
        _arrays(12, (3, 3)),
    ),
    "qr": (
        lambda a: _flat_cat(linalg.qr(a)),
        lambda t, a: _tflat_cat(t, t.linalg.qr(a)),
        _arrays(13, (2, 4, 3)),
    ),
    "qr_square": (
        lambda a: _flat_cat(linalg.qr(a, mode="complete")),
        lambda t, a: _tflat_cat(t, t.linalg.qr(a, mode="complete")),
        _arrays(14, (3, 3)),
    ),
    "svd": (_gauge_svd, _tgauge_svd, _arrays(15, (2, 4, 3))),
    "svd_wide": (_gauge_svd, _tgauge_svd, _arrays(16, (3, 5))),
    "svd_full_square": (
        lambda a: _gauge_svd(a, True),
        lambda t, a: _tgauge_svd(t, a, True),
        _arrays(17, (2, 3, 3)),
    ),
    "svd_full_tall": (
        lambda a: _gauge_svd(a, True),
        lambda t, a: _tgauge_svd(t, a, True),
        _arrays(31, (4, 3)),
    ),
    "svdvals": (linalg.svdvals, lambda t, a: t.linalg.svdvals(a), _arrays(18, (2, 4, 3))),
    "eigh": (_gauge_eigh, _tgauge_eigh, _arrays(19, (2, 3, 3))),
    "eigvalsh": (
        lambda a: linalg.eigvalsh(_sym(a), UPLO="U"),
        lambda t, a: t.linalg.eigvalsh(_tsym(a), UPLO="U"),
        _arrays(20, (2, 3, 3)),
    ),
    "lstsq": (
        lambda a, b: linalg.lstsq(a, b).solution,
        lambda t, a, b: t.linalg.lstsq(a, b, driver="gelsd").solution,
        _arrays(21, (2, 5, 3), (2, 5, 2)),
    ),
    "pinv": (linalg.pinv, lambda t, a: t.linalg.pinv(a), _arrays(22, (2, 4, 3))),
    "pinv_wide": (linalg.pinv, lambda t, a: t.linalg.pinv(a), _arrays(23, (3, 5))),
    "matrix_exp": (linalg.matrix_exp, lambda t, a: t.linalg.matrix_exp(a), _arrays(24, (2, 3, 3))),
    "matrix_exp_large": (linalg.matrix_exp, lambda t, a: t.linalg.matrix_exp(a), _arrays(25, (3, 3), scale=4.0)),
    "matrix_power": (
        lambda a: linalg.matrix_power(a, 3),
        lambda t, a: t.linalg.matrix_power(a, 3),
        _arrays(26, (2, 3, 3)),
    ),
    "matrix_power_negative": (
        lambda a: linalg.matrix_power(a, -2),
        lambda t, a: t.linalg.matrix_power(a, -2),
        _arrays(27, (3, 3), shift=3.0),
    ),
    "cross": (
        lambda a, b: linalg.cross(a, b),
        lambda t, a, b: t.linalg.cross(a, b),
        _arrays(28, (2, 3), (1, 3)),
    ),
}

CASES["inv_ex"] = (
    lambda a: linalg.inv_ex(a).inverse,
    lambda t, a: t.linalg.inv_ex(a).inverse,
    _arrays(31, (2, 3, 3), shift=3.0),
)
CASES["solve_ex"] = (
    lambda a, b: linalg.solve_ex(a, b).result,
    lambda t, a, b: t.linalg.solve_ex(a, b).result,
    _arrays(32, (2, 3, 3), (3, 2), shift=3.0),
)
CASES["cholesky_ex"] = (
    lambda a: linalg.cholesky_ex(_spd(a)).L,
    lambda t, a: t.linalg.cholesky_ex(_tspd(t, a)).L,
    _arrays(33, (2, 3, 3)),
)
CASES["norm"] = (lambda a: linalg.norm(a), lambda t, a: t.linalg.norm(a), _arrays(34, (2, 3, 4)))

for _ord in ("fro", "nuc", 1, -1, 2, -2, INF, -INF):
    CASES[f"matrix_norm_{_ord}"] = (
        (lambda o: lambda a: linalg.matrix_norm(a, o))(_ord),
        (lambda o: lambda t, a: t.linalg.matrix_norm(a, o))(_ord),
        _arrays(29, (2, 3, 4)),
    )

for _ord, _dim in ((2, None), (1, -1), (INF, (0, 2)), (3, 1)):
    CASES[f"vector_norm_{_ord}_{_dim}"] = (
        (lambda o, d: lambda a: linalg.vector_norm(a, o, d))(_ord, _dim),
        (lambda o, d: lambda t, a: t.linalg.vector_norm(a, o, d))(_ord, _dim),
        _arrays(30, (2, 3, 4)),
    )

#: The public functions of ember.linalg without a gradient: matrix_rank gives ints.
NOT_DIFFERENTIABLE = {"matrix_rank"}

#: The cases whose fn has a second derivative worth checking against PyTorch's.
SECOND_ORDER = [
    "inv",
    "det",
    "slogdet",
    "solve",
    "solve_triangular_upper",
    "cholesky",
    "qr",
    "svd",
    "svdvals",
    "eigh",
    "eigvalsh",
    "pinv",
    "lstsq",
    "matrix_exp",
]
