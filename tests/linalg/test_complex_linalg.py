"""``ember.linalg`` on complex64 and complex128 matrices against ``torch.linalg``: values
on flex (and through autodiff and fusion), gradients with PyTorch's convention for
complex inputs (``dL/dRe + i dL/dIm`` of a real loss ``Re(sum(out * conj(w)))``).

Results unique only up to a phase (the vectors of ``svd`` and ``eigh``) enter through
gauge-invariant products; Hermitian inputs are made Hermitian inside the fn, so both
sides differentiate the same function.
"""

from __future__ import annotations

import numpy as np
import pytest

from ember import Tensor, linalg
from ember.errors import DTypeError, LinAlgError
from tests.conftest import make_device

DEVICES = ["flex", "flex+autodiff", "flex+fusion+autodiff"]
DTYPES = [np.complex64, np.complex128]


def _herm(x):
    return x.add(x.swap_dims(-1, -2).conj()).mul_scalar(0.5)


def _thm(x):
    return (x + x.mH) / 2


def _hpd(x):
    return _herm(x).add(Tensor.eye(x.dims()[-1], device=x._device, dtype=x.dtype).mul_scalar(3.0))


def _thpd(t, x):
    return _thm(x) + 3.0 * t.eye(x.shape[-1], dtype=x.dtype)


def _cat(parts):
    dtype = next(p.dtype for p in parts if p.dtype.is_complex)
    return Tensor.cat([p.reshape([-1]).cast(dtype) for p in parts], 0)


def _tcat(t, parts):
    dtype = next(p.dtype for p in parts if p.is_complex())
    return t.cat([p.reshape(-1).to(dtype) for p in parts])


def _weights(k, like):
    return np.arange(1.0, k + 1.0).astype(np.zeros((), like).real.dtype)


def _gauge_svd(x, full=False):
    u, s, vh = linalg.svd(x, full_matrices=full)
    k = s.dims()[-1]
    c = Tensor.from_data(_weights(k, x.to_numpy().dtype), device=x._device).cast(x.dtype)
    u, vh = u.narrow(-1, 0, k), vh.narrow(-2, 0, k)
    return _cat([u.mul(c).matmul(vh), s])


def _tgauge_svd(t, x, full=False):
    u, s, vh = t.linalg.svd(x, full_matrices=full)
    k = s.shape[-1]
    c = t.tensor(_weights(k, x.detach().numpy().dtype)).to(x.dtype)
    return _tcat(t, [(u[..., :k] * c) @ vh[..., :k, :], s])


def _gauge_eigh(x):
    w, v = linalg.eigh(_herm(x))
    c = Tensor.from_data(_weights(w.dims()[-1], x.to_numpy().dtype), device=x._device).cast(x.dtype)
    return _cat([w, v.mul(c).matmul(v.swap_dims(-1, -2).conj()), v.abs()])


def _tgauge_eigh(t, x):
    w, v = t.linalg.eigh(_thm(x))
    c = t.tensor(_weights(w.shape[-1], x.detach().numpy().dtype)).to(x.dtype)
    return _tcat(t, [w, (v * c) @ v.mH, v.abs()])


# name -> (ember fn, torch fn, shapes, shift added to square inputs, differentiable)
CASES = {
    "inv": (linalg.inv, lambda t, a: t.linalg.inv(a), [(2, 3, 3)], 3.0, True),
    "det": (linalg.det, lambda t, a: t.linalg.det(a), [(2, 3, 3)], 1.0, True),
    "slogdet_logabs": (
        lambda a: linalg.slogdet(a).logabsdet,
        lambda t, a: t.linalg.slogdet(a).logabsdet,
        [(2, 3, 3)],
        1.0,
        True,
    ),
    "slogdet_sign": (lambda a: linalg.slogdet(a).sign, lambda t, a: t.linalg.slogdet(a).sign, [(2, 3, 3)], 1.0, True),
    "slogdet_both": (
        lambda a: _cat(list(linalg.slogdet(a))),
        lambda t, a: _tcat(t, list(t.linalg.slogdet(a))),
        [(2, 3, 3)],
        1.0,
        True,
    ),
    "solve": (linalg.solve, lambda t, a, b: t.linalg.solve(a, b), [(2, 3, 3), (3, 2)], 3.0, True),
    "solve_vector": (linalg.solve, lambda t, a, b: t.linalg.solve(a, b), [(3, 3), (3,)], 3.0, True),
    "solve_right": (
        lambda a, b: linalg.solve(a, b, left=False),
        lambda t, a, b: t.linalg.solve(a, b, left=False),
        [(2, 3, 3), (2, 4, 3)],
        3.0,
        True,
    ),
    "solve_triangular": (
        lambda a, b: linalg.solve_triangular(a, b, upper=True),
        lambda t, a, b: t.linalg.solve_triangular(a, b, upper=True),
        [(2, 3, 3), (2, 3, 2)],
        3.0,
        True,
    ),
    "cholesky": (lambda a: linalg.cholesky(_hpd(a)), lambda t, a: t.linalg.cholesky(_thpd(t, a)), [(2, 3, 3)], 0, True),
    "cholesky_upper": (
        lambda a: linalg.cholesky(_hpd(a), upper=True),
        lambda t, a: t.linalg.cholesky(_thpd(t, a), upper=True),
        [(3, 3)],
        0,
        True,
    ),
    "qr": (lambda a: _cat(list(linalg.qr(a))), lambda t, a: _tcat(t, list(t.linalg.qr(a))), [(2, 4, 3)], 0, True),
    "qr_square": (lambda a: _cat(list(linalg.qr(a))), lambda t, a: _tcat(t, list(t.linalg.qr(a))), [(3, 3)], 0, True),
    "svd_tall": (_gauge_svd, _tgauge_svd, [(2, 4, 3)], 0, True),
    "svd_wide_full": (lambda a: _gauge_svd(a, True), lambda t, a: _tgauge_svd(t, a, True), [(3, 5)], 0, True),
    "svd_abs_u": (
        lambda a: linalg.svd(a, full_matrices=False).U.abs(),
        lambda t, a: t.linalg.svd(a, full_matrices=False).U.abs(),
        [(2, 4, 3)],
        0,
        True,
    ),
    "svdvals": (linalg.svdvals, lambda t, a: t.linalg.svdvals(a), [(2, 3, 4)], 0, True),
    "eigh": (_gauge_eigh, _tgauge_eigh, [(2, 3, 3)], 0, True),
    "eigvalsh": (lambda a: linalg.eigvalsh(_herm(a)), lambda t, a: t.linalg.eigvalsh(_thm(a)), [(2, 3, 3)], 0, True),
    "pinv": (linalg.pinv, lambda t, a: t.linalg.pinv(a), [(2, 4, 3)], 0, True),
    "pinv_hermitian": (
        lambda a: linalg.pinv(_herm(a), hermitian=True),
        lambda t, a: t.linalg.pinv(_thm(a), hermitian=True),
        [(3, 3)],
        0,
        True,
    ),
    "lstsq": (
        lambda a, b: linalg.lstsq(a, b).solution,
        lambda t, a, b: t.linalg.lstsq(a, b, driver="gelsd").solution,
        [(2, 5, 3), (2, 5, 2)],
        0,
        True,
    ),
    "lstsq_all": (
        lambda a, b: _cat(list(linalg.lstsq(a, b))),
        lambda t, a, b: _tcat(t, list(t.linalg.lstsq(a, b, driver="gelsd"))),
        [(2, 5, 3), (2, 5, 2)],
        0,
        False,
    ),
    "matrix_rank": (
        lambda a: linalg.matrix_rank(a.matmul(a.swap_dims(-1, -2))),
        lambda t, a: t.linalg.matrix_rank(a @ a.mT),
        [(2, 4, 2)],
        0,
        False,
    ),
    "matrix_norm_nuc": (
        lambda a: linalg.matrix_norm(a, "nuc"),
        lambda t, a: t.linalg.matrix_norm(a, "nuc"),
        [(2, 3, 4)],
        0,
        True,
    ),
    "matrix_norm_2": (
        lambda a: linalg.matrix_norm(a, 2),
        lambda t, a: t.linalg.matrix_norm(a, 2),
        [(2, 4, 3)],
        0,
        True,
    ),
    "matrix_exp": (linalg.matrix_exp, lambda t, a: t.linalg.matrix_exp(a), [(2, 3, 3)], 0, True),
}


def _arrays(name, dtype):
    _, _, shapes, shift, _ = CASES[name]
    rng = np.random.default_rng(sorted(CASES).index(name))
    out = []
    for shape in shapes:
        a = rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape)
        if shift and len(shape) >= 2 and shape[-1] == shape[-2]:
            a = a + shift * np.eye(shape[-1])
        out.append(a.astype(dtype))
    return out


def _tol(dtype):
    return {"rtol": 2e-4, "atol": 2e-4} if dtype == np.complex64 else {"rtol": 1e-9, "atol": 1e-10}


def _check_values(name, dtype, device, torch):
    fn, torch_fn, _, _, _ = CASES[name]
    arrays = _arrays(name, dtype)
    expected = torch_fn(torch, *(torch.tensor(a) for a in arrays))
    out = fn(*(Tensor.from_data(a, device=device) for a in arrays))
    got = out.to_numpy()
    want = expected.resolve_conj().numpy()
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    np.testing.assert_allclose(got, want, **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=["complex64", "complex128"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_complex_values_match_torch(name, dtype, torch):
    _check_values(name, dtype, make_device("flex"), torch)


@pytest.mark.parametrize("device_name", DEVICES[1:])
@pytest.mark.parametrize("name", sorted(CASES))
def test_complex_values_through_decorators(name, device_name, torch):
    _check_values(name, np.complex128, make_device(device_name), torch)


def _real_loss(out, w):
    """``Re(sum(out * conj(w)))``: a real scalar of a real or complex output."""
    if out.dtype.is_complex:
        return out.mul(w.conj()).real().sum()
    return out.mul(w.real()).sum()


@pytest.mark.parametrize("dtype", DTYPES, ids=["complex64", "complex128"])
@pytest.mark.parametrize("device_name", ["flex+autodiff", "flex+fusion+autodiff", "cube+autodiff"])
@pytest.mark.parametrize("name", sorted(n for n, case in CASES.items() if case[4]))
def test_complex_gradients_match_torch(name, device_name, dtype, torch):
    if device_name == "flex+fusion+autodiff" and dtype == np.complex64:
        pytest.skip("the fusion device runs the complex128 case")
    if device_name == "cube+autodiff" and dtype == np.complex128:
        pytest.skip("cube holds complex64 only (LAPACK runs on the host)")
    fn, torch_fn, _, _, _ = CASES[name]
    arrays = _arrays(name, dtype)
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    expected = torch_fn(torch, *ts)
    rng = np.random.default_rng(99)
    w = (rng.uniform(-1, 1, tuple(expected.shape)) + 1j * rng.uniform(-1, 1, tuple(expected.shape))).astype(dtype)
    tw = torch.tensor(w)
    tloss = (expected * tw.conj()).real.sum() if expected.is_complex() else (expected * tw.real).sum()
    tloss.backward()
    device = make_device(device_name)
    xs = [Tensor.from_data(a, device=device).require_grad() for a in arrays]
    loss = _real_loss(fn(*xs), Tensor.from_data(w, device=device))
    grads = loss.backward()
    for x, t in zip(xs, ts):
        np.testing.assert_allclose(x.grad(grads).to_numpy(), t.grad.resolve_conj().numpy(), **_tol(dtype))


def test_complex_operands_must_match():
    device = make_device("flex")
    a = Tensor.from_data(np.eye(3, dtype=np.complex128), device=device)
    with pytest.raises(DTypeError, match=r"linalg\.solve: A is complex128 but B is complex64"):
        linalg.solve(a, Tensor.from_data(np.ones((3, 1), np.complex64), device=device))
    with pytest.raises(DTypeError, match=r"linalg\.inv: A has dtype int64.*complex64"):
        linalg.inv(Tensor.from_data(np.eye(3, dtype=np.int64), device=device))


@pytest.mark.parametrize("device_name", DEVICES)
def test_real_results_of_complex_matrices_are_real(device_name):
    """Singular values, eigenvalues, log|det|, lstsq's residuals and singular values are
    real (float64 of complex128), as PyTorch's, also when autodiff tracks them."""
    device = make_device(device_name)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 4, 3)) + 1j * rng.standard_normal((2, 4, 3))
    x = Tensor.from_data(a, device=device)
    if device.is_autodiff():
        x = x.require_grad()
    sq = x.narrow(-2, 0, 3)
    lst = linalg.lstsq(x, x.narrow(-1, 0, 1))
    real = {
        "S": linalg.svd(x).S,
        "svdvals": linalg.svdvals(x),
        "eigenvalues": linalg.eigh(sq).eigenvalues,
        "eigvalsh": linalg.eigvalsh(sq),
        "logabsdet": linalg.slogdet(sq).logabsdet,
        "residuals": lst.residuals,
        "singular_values": lst.singular_values,
        "nuc": linalg.matrix_norm(x, "nuc"),
    }
    for name, t in real.items():
        assert t.dtype.name.lower() == "float64", (name, t.dtype)
    assert linalg.slogdet(sq).sign.dtype.name.lower() == "complex128"
    np.testing.assert_allclose(linalg.svd(x).S.to_numpy(), np.linalg.svd(a, compute_uv=False), rtol=1e-10)


def test_complex_singular_and_not_positive_definite_matrices():
    """The info and errors of complex matrices, as torch's: the zero pivot of a singular
    matrix, the leading minor of a Hermitian one that is not positive-definite."""
    device = make_device("flex")
    singular = np.array([[1, 2j], [2, 4j]], np.complex128)
    indefinite = np.array([[1, 2j], [-2j, 1]], np.complex128)
    with pytest.raises(LinAlgError, match="pivot 2 of its LU factorization is zero"):
        linalg.inv(Tensor.from_data(singular, device=device))
    assert linalg.inv_ex(Tensor.from_data(singular, device=device)).info.tolist() == 2
    with pytest.raises(LinAlgError, match="leading minor of order 2.*Hermitian"):
        linalg.cholesky(Tensor.from_data(indefinite, device=device))
    batch = np.stack([indefinite, np.eye(2, dtype=np.complex128)])
    assert linalg.cholesky_ex(Tensor.from_data(batch, device=device)).info.tolist() == [2, 0]


@pytest.mark.parametrize("name", sorted(n for n, case in CASES.items() if case[4]))
def test_complex_second_derivatives_match_torch(name, torch):
    """A double backward (``create_graph``) of ``S = Re(sum(dL/dx * conj(v)))`` matches
    torch's, complex128 on flex+autodiff."""
    fn, torch_fn, _, _, _ = CASES[name]
    arrays = _arrays(name, np.complex128)
    rng = np.random.default_rng(7)
    vs = [rng.uniform(-1, 1, a.shape) + 1j * rng.uniform(-1, 1, a.shape) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    expected = torch_fn(torch, *ts)
    w = rng.uniform(-1, 1, tuple(expected.shape)) + 1j * rng.uniform(-1, 1, tuple(expected.shape))
    tw = torch.tensor(w)
    tloss = (expected * tw.conj()).real.sum() if expected.is_complex() else (expected * tw.real).sum()
    tgrads = torch.autograd.grad(tloss, ts, create_graph=True)
    ts_ = sum((g * torch.tensor(v).conj()).real.sum() for g, v in zip(tgrads, vs))
    want = torch.autograd.grad(ts_, ts, allow_unused=True)
    device = make_device("flex+autodiff")
    xs = [Tensor.from_data(a, device=device).require_grad() for a in arrays]
    grads = _real_loss(fn(*xs), Tensor.from_data(w, device=device)).backward(create_graph=True)
    s = None
    for x, v in zip(xs, vs):
        term = x.grad(grads).mul(Tensor.from_data(v, device=device).conj()).real().sum()
        s = term if s is None else s.add(term)
    second = s.backward()
    for x, t in zip(xs, want):
        got = x.grad(second)
        expect = np.zeros(x.dims(), np.complex128) if t is None else t.resolve_conj().numpy()
        np.testing.assert_allclose(np.zeros(x.dims()) if got is None else got.to_numpy(), expect, rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("name", ["flex+autodiff", "flex+fusion+autodiff"])
def test_compiled_complex_step_matches_eager(name):
    """ember.compile captures complex decompositions and their backward (the real
    outputs' dtypes in the graph's shape rules) and replays them with new values."""
    import ember

    device = make_device(name)

    def step(a):
        a = a.require_grad()
        u, s, vh = linalg.svd(a, full_matrices=False)
        loss = (
            s.sum()
            .add(linalg.solve(a, a.conj()).abs().sum())
            .add(linalg.slogdet(a).logabsdet.sum())
            .add(linalg.eigh(a.matmul(a.swap_dims(-1, -2).conj())).eigenvalues.sum())
            .add(u.abs().sum())
        )
        return loss, a.grad(loss.backward())

    compiled = ember.compile(step)
    rng = np.random.default_rng(5)
    for _ in range(3):
        a = rng.uniform(size=(2, 3, 3)) + 1j * rng.uniform(size=(2, 3, 3)) + 3 * np.eye(3)
        x = Tensor.from_data(a, device=device)
        for ours, eager in zip(compiled(x), step(x)):
            np.testing.assert_allclose(ours.to_numpy(), eager.to_numpy(), rtol=1e-10, atol=1e-12)
    assert compiled.stats["traces"] == 1 and compiled.stats["replays"] == 2 and not compiled.stats["eager"]
