"""``ember.linalg``'s errors (singular, not positive-definite, bad shapes and dtypes),
the ``*_ex`` info tensors against PyTorch's, special inputs, and ``ember.compile``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ember
from ember import Device, Tensor, linalg
from ember.errors import DTypeError, LinAlgError, RankError, ShapeError, ValueRangeError
from tests.conftest import float64_supported


def _t(a, device=None, dtype="float64"):
    return Tensor.from_data(np.asarray(a, dtype=np.float64), device=device or Device.flex(), dtype=dtype)


def _batch_with_singular(index, pivot_matrix):
    a = np.stack([np.eye(3) * (i + 2) for i in range(5)])
    a[index] = pivot_matrix
    return a


SINGULAR = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])


def test_inv_of_a_singular_matrix_names_the_batch_element_and_the_pivot(device):
    dtype = "float64" if float64_supported(device) else "float32"
    a = _t(_batch_with_singular(3, SINGULAR), device, dtype)
    # A fusion device records the call and raises when the stream runs (reading the result).
    with pytest.raises(LinAlgError, match=r"linalg\.inv: the matrix at batch index 3 is singular \(pivot 3"):
        linalg.inv(a).to_numpy()
    with pytest.raises(LinAlgError, match=r"linalg\.solve: the matrix at batch index 3 is singular"):
        linalg.solve(a, _t(np.ones((5, 3, 1)), device, dtype)).to_numpy()


def test_non_converging_inputs_raise_ember_errors(device, capfd):
    """An inf or NaN stops LAPACK's iterations (SVD, the symmetric eigensolver, least
    squares): an ember LinAlgError names the op and the batch element, as torch.linalg
    raises (numpy's own error and LAPACK's stderr notes stay inside)."""
    dtype = "float64" if float64_supported(device) else "float32"
    a = np.stack([np.eye(3) * 3 + 0.1 for _ in range(4)])
    a[2, 1, 0] = np.nan  # in the lower triangle, which eigh reads
    x, b = _t(a, device, dtype), _t(np.ones((4, 3, 2)), device, dtype)
    for name, call in [
        ("svd", lambda: linalg.svd(x)[1]),
        ("svdvals", lambda: linalg.svdvals(x)),
        ("eigh", lambda: linalg.eigh(x)[0]),
        ("eigvalsh", lambda: linalg.eigvalsh(x)),
        ("pinv", lambda: linalg.pinv(x)),
        ("svdvals", lambda: linalg.matrix_rank(x)),
        ("lstsq", lambda: linalg.lstsq(x, b).solution),
    ]:
        # A fusion device records the call and raises when the stream runs (reading the result).
        with pytest.raises(
            LinAlgError,
            match=rf"linalg\.{name}: the algorithm did not converge: the matrix at "
            r"batch index 2 holds non-finite values",
        ):
            call().to_numpy()
    with pytest.raises(LinAlgError, match=r"linalg\.svd: .*: the matrix holds non-finite values \(inf or NaN\)"):
        linalg.svd(_t(a[2], device, dtype))[0].to_numpy()
    assert "DLASCL" not in capfd.readouterr().err


def test_a_multi_dim_batch_index_is_named_too():
    a = _batch_with_singular(4, SINGULAR).reshape(1, 5, 3, 3)
    with pytest.raises(LinAlgError, match=r"batch index 4 \(index \[0, 4\]\)"):
        linalg.inv(_t(a))


@pytest.mark.torch
def test_ex_variants_give_torch_info(torch):
    a = np.stack([np.eye(3), SINGULAR, np.zeros((3, 3))])
    inverse, info = linalg.inv_ex(_t(a))
    expected = torch.linalg.inv_ex(torch.tensor(a)).info.numpy()
    np.testing.assert_array_equal(info.to_numpy(), expected)
    assert info.dtype == ember.int32
    np.testing.assert_allclose(inverse.to_numpy()[0], np.eye(3))
    assert np.isnan(inverse.to_numpy()[1:]).all()
    x, info = linalg.solve_ex(_t(a), _t(np.ones((3, 1))))
    np.testing.assert_array_equal(info.to_numpy(), expected)
    np.testing.assert_allclose(x.to_numpy()[0], np.ones((3, 1)))
    with pytest.raises(LinAlgError, match="batch index 1"):
        linalg.inv_ex(_t(a), check_errors=True)


@pytest.mark.torch
def test_cholesky_names_the_leading_minor(device, torch):
    dtype = "float64" if float64_supported(device) else "float32"
    spd = np.array([[4.0, 2.0, 0.0], [2.0, 3.0, 0.0], [0.0, 0.0, 1.0]])
    bad = np.array([[4.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]])  # minor of order 2 is 0
    a = np.stack([spd, spd, bad])
    with pytest.raises(LinAlgError, match=r"batch index 2 is not positive-definite \(its leading minor of order 2"):
        linalg.cholesky(_t(a, device, dtype)).to_numpy()
    low, info = linalg.cholesky_ex(_t(a, device, dtype))
    expected = torch.linalg.cholesky_ex(torch.tensor(a)).info.numpy()
    np.testing.assert_array_equal(info.to_numpy(), expected)
    np.testing.assert_allclose(low.to_numpy()[0], np.linalg.cholesky(spd), rtol=1e-6)
    upper, _ = linalg.cholesky_ex(_t(a[:2], device, dtype), upper=True)
    np.testing.assert_allclose(upper.to_numpy()[1], np.linalg.cholesky(spd).T, rtol=1e-6)


def test_wrong_ranks_shapes_and_dtypes_get_clear_errors():
    with pytest.raises(RankError, match=r"linalg\.inv: A must be a matrix or a batch of matrices"):
        linalg.inv(_t([1.0, 2.0]))
    with pytest.raises(ShapeError, match=r"linalg\.det: A must be a batch of square matrices"):
        linalg.det(_t(np.ones((2, 3))))
    with pytest.raises(DTypeError, match=r"linalg\.svd: A has dtype int64.*cast first"):
        linalg.svd(Tensor.from_data([[1, 2], [3, 4]], device=Device.flex()))
    with pytest.raises(DTypeError, match="A is float64 but B is float32"):
        linalg.solve(_t(np.eye(2)), _t(np.ones((2, 1)), dtype="float32"))
    with pytest.raises(ShapeError, match=r"B must be \[\.\.\., 3, k\] or \[\.\.\., 3\]"):
        linalg.solve(_t(np.eye(3)), _t(np.ones((2, 1))))
    with pytest.raises(ShapeError, match="batch dims of A"):
        linalg.solve(_t(np.ones((2, 3, 3))), _t(np.ones((4, 3, 1))))
    with pytest.raises(ValueRangeError, match="mode must be"):
        linalg.qr(_t(np.eye(2)), mode="full")
    with pytest.raises(ValueRangeError, match="UPLO"):
        linalg.eigh(_t(np.eye(2)), UPLO="X")
    with pytest.raises(ValueRangeError, match="ord must be one of"):
        linalg.matrix_norm(_t(np.eye(2)), ord=3)
    with pytest.raises(ShapeError, match="same rank"):
        linalg.cross(_t(np.ones((2, 3))), _t(np.ones(3)))


@pytest.mark.torch
def test_special_inputs_match_torch(torch):
    eye = np.eye(4)
    np.testing.assert_allclose(linalg.inv(_t(eye)).to_numpy(), eye)
    assert linalg.det(_t(eye)).item() == 1.0
    assert linalg.det(_t(SINGULAR)).item() == 0.0
    sign, logabs = linalg.slogdet(_t(SINGULAR))
    assert sign.item() == 0.0 and logabs.item() == -np.inf
    empty = np.zeros((0, 3, 3))
    for fn in (linalg.inv, linalg.det, linalg.svdvals, linalg.eigvalsh, linalg.matrix_exp):
        out = fn(_t(empty))
        theirs = getattr(torch.linalg, fn.__name__)(torch.tensor(empty))
        assert out.dims() == list(theirs.shape), fn.__name__
    s = linalg.svd(_t(np.zeros((0, 2, 3)))).S
    assert s.dims() == [0, 2]
    assert linalg.matrix_rank(_t(SINGULAR)).item() == 2
    assert linalg.matrix_rank(_t(np.stack([eye, np.zeros((4, 4))]))).tolist() == [4, 0]
    assert linalg.matrix_power(_t(np.ones((2, 3, 3))), 0).dims() == [2, 3, 3]
    r = linalg.qr(_t(np.ones((4, 3))), mode="r")
    assert r.Q.dims() == [0] and r.R.dims() == [3, 3]
    a, b = np.arange(12.0).reshape(4, 3) ** 2, np.random.default_rng(1).uniform(size=(4, 2))
    lst = linalg.lstsq(_t(a), _t(b))
    theirs = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b), driver="gelsd")
    np.testing.assert_allclose(lst.solution.to_numpy(), theirs.solution.numpy(), rtol=1e-9)
    np.testing.assert_allclose(lst.residuals.to_numpy(), theirs.residuals.numpy(), rtol=1e-9)
    assert lst.rank.item() == theirs.rank.item()
    np.testing.assert_allclose(lst.singular_values.to_numpy(), theirs.singular_values.numpy(), rtol=1e-9)


@pytest.mark.torch
def test_norm_dispatch_matches_torch(torch):
    a = np.random.default_rng(0).uniform(-1, 1, size=(2, 3, 4))
    for ord_, dim in ((None, None), ("fro", (1, 2)), (2, (0, 2)), (1, 1), (float("inf"), None)):
        x = a if not (ord_ is not None and dim is None) else a[0]
        ours = linalg.norm(_t(x), ord_, dim)
        theirs = torch.linalg.norm(torch.tensor(x), ord_, dim)
        np.testing.assert_allclose(ours.to_numpy(), theirs.numpy(), rtol=1e-12, err_msg=f"{ord_}, {dim}")
    ours = linalg.matrix_norm(_t(a), "nuc", keepdim=True)
    assert ours.dims() == list(torch.linalg.matrix_norm(torch.tensor(a), "nuc", keepdim=True).shape)


def test_qr_gradient_of_a_wide_matrix_is_refused():
    a = _t(np.ones((2, 3)), Device.flex().autodiff()).require_grad()
    q, r = linalg.qr(a)
    with pytest.raises(ember.errors.GraphError, match="m >= n"):
        r.sum().backward()


def _solve_svd_step(a, b):
    """A step whose forward and backward call LAPACK (solve, svd and their rules)."""
    a = a.require_grad()
    loss = linalg.solve(a, b).mul_scalar(2.0).sum().add(linalg.svd(a, full_matrices=False).S.sum())
    return loss, a.grad(loss.backward())


def _det_step(a, b):
    a = a.require_grad()
    fit = linalg.lstsq(a, b)
    loss = linalg.det(a).add(fit.solution.sum())
    return loss, a.grad(loss.backward()), fit.residuals, fit.rank


@pytest.mark.parametrize("fn", [_solve_svd_step, _det_step])
def test_compile_captures_lapack_calls(fn):
    """A LAPACK call is a library-call node of a compiled step (replayed with new values):
    the forward calls, det's backward (branch-free: inverse or SVD adjugate per matrix)
    and lstsq, without a graph break."""
    device = Device.flex().autodiff()
    rng = np.random.default_rng(0)
    step = ember.compile(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ember.errors.FallbackWarning)
        for _ in range(3):
            a = _t(rng.uniform(size=(3, 3)) + 3 * np.eye(3), device)
            b = _t(rng.uniform(size=(3, 2)), device)
            for ours, eager in zip(step(a, b), fn(a, b)):
                np.testing.assert_allclose(ours.to_numpy(), eager.to_numpy(), rtol=1e-12, atol=1e-14)
    assert step.stats["replays"] >= 2 and not step.stats.get("eager"), step.stats


def test_compiled_det_gradient_of_a_singular_matrix_and_lstsq_residuals():
    """One compiled graph serves invertible and singular matrices (det's gradient is the
    adjugate either way) and tall systems (lstsq's residuals, as eager for full rank;
    in compiled code a rank-deficient system gives its squared residual norms)."""
    device = Device.flex().autodiff()
    rng = np.random.default_rng(1)

    def fn(a, c, b):
        a = a.require_grad()
        fit = linalg.lstsq(c, b)
        return a.grad(linalg.det(a).sum().backward()), fit.solution, fit.residuals

    step = ember.compile(fn)
    b = _t(rng.uniform(size=(4, 2)), device)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ember.errors.FallbackWarning)
        for a in (rng.uniform(size=(2, 3, 3)), np.stack([SINGULAR, np.eye(3)]), rng.uniform(size=(2, 3, 3))):
            c = _t(rng.uniform(size=(4, 3)), device)
            for ours, eager in zip(step(_t(a, device), c, b), fn(_t(a, device), c, b)):
                np.testing.assert_allclose(ours.to_numpy(), eager.to_numpy(), rtol=1e-10, atol=1e-12)
        deficient = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
        _, x, residuals = step(_t(np.stack([np.eye(3)] * 2), device), _t(deficient, device), b)
    assert linalg.lstsq(_t(deficient, device), b).residuals.dims() == [0]  # eager: PyTorch's rule
    expected = ((b.to_numpy() - deficient @ x.to_numpy()) ** 2).sum(0)
    np.testing.assert_allclose(residuals.to_numpy(), expected, rtol=1e-10)
    assert step.stats["replays"] >= 3, step.stats


def test_a_compiled_step_raises_for_a_singular_matrix():
    step = ember.compile(lambda a: linalg.inv(a).sum())
    step(_t(np.eye(3) * 2)).to_numpy()
    with pytest.raises(LinAlgError, match="is singular"):
        step(_t(SINGULAR)).to_numpy()


def test_a_single_matrix_gives_0d_results(device):
    dtype = "float64" if float64_supported(device) else "float32"
    a = _t(np.eye(3) * 2, device, dtype)
    det = linalg.det(a)
    assert det.dims() == [] and det.item() == pytest.approx(8.0)
    assert [t.dims() for t in linalg.slogdet(a)] == [[], []]
    assert linalg.inv_ex(a).info.dims() == []
    assert linalg.cholesky_ex(a).info.dims() == []


def test_complex_norms_and_cross_match_torch(device, torch):
    """vector_norm, matrix_norm and cross take
    complex tensors, values and gradients as torch's; so do the decompositions (inv and
    the nuclear norm here, on every device)."""
    from tests.fft.helpers import complex_dtype, holds_complex

    if not holds_complex(device):
        return
    dtype = complex_dtype(device)
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((2, 3, 3)) + 1j * rng.standard_normal((2, 3, 3))).astype(dtype)
    b = (rng.standard_normal((2, 3, 3)) + 1j * rng.standard_normal((2, 3, 3))).astype(dtype)
    cases = [
        (lambda x, y: linalg.vector_norm(x, 3, dim=-1), lambda x, y: torch.linalg.vector_norm(x, 3, dim=-1)),
        (lambda x, y: linalg.vector_norm(x), lambda x, y: torch.linalg.vector_norm(x)),
        (lambda x, y: linalg.matrix_norm(x), lambda x, y: torch.linalg.matrix_norm(x)),
        (lambda x, y: linalg.matrix_norm(x, 1), lambda x, y: torch.linalg.matrix_norm(x, 1)),
        (lambda x, y: linalg.matrix_norm(x, -np.inf), lambda x, y: torch.linalg.matrix_norm(x, -np.inf)),
        (lambda x, y: linalg.cross(x, y).abs(), lambda x, y: torch.linalg.cross(x, y).abs()),
    ]
    tol = {"rtol": 1e-4, "atol": 1e-5} if dtype == np.complex64 else {"rtol": 1e-10, "atol": 1e-12}
    for ours_fn, torch_fn in cases:
        tx, ty = (torch.tensor(v, requires_grad=True) for v in (a, b))
        expected = torch_fn(tx, ty)
        expected.sum().backward()
        x, y = (Tensor.from_data(v, device=device) for v in (a, b))
        if device.is_autodiff():
            x, y = x.require_grad(), y.require_grad()
        out = ours_fn(x, y)
        np.testing.assert_allclose(out.to_numpy(), expected.detach().numpy(), **tol)
        if device.is_autodiff():
            grads = out.sum().backward()
            np.testing.assert_allclose(x.grad(grads).to_numpy(), tx.grad.resolve_conj().numpy(), **tol)
    # The decompositions take complex matrices on every device (on the host where the
    # device has no LAPACK of its own); tests/linalg/test_complex_linalg.py has the rest.
    x = Tensor.from_data(a, device=device)
    np.testing.assert_allclose(linalg.inv(x).to_numpy(), np.linalg.inv(a), **tol)
    nuc = torch.linalg.matrix_norm(torch.tensor(a), "nuc").numpy()
    np.testing.assert_allclose(linalg.matrix_norm(x, "nuc").to_numpy(), nuc, **tol)


@pytest.mark.parametrize("name", ["flex+autodiff", "flex+fusion+autodiff"])
def test_compiled_ir_holds_lapack_and_fft_calls(name):
    """In a compiled step (forward and backward) the decompositions and the FFT are
    nodes of the captured graph, replayed with new values, not graph breaks."""
    from tests.conftest import make_device

    device = make_device(name)

    def step(a, x):
        a = a.require_grad()
        loss = linalg.svdvals(a).sum().add(linalg.solve(a, a).sum()).add(ember.fft.rfft(x).abs().sum())
        return loss, a.grad(loss.backward())

    compiled = ember.compile(step)
    rng = np.random.default_rng(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ember.errors.FallbackWarning)
        for _ in range(3):
            a = _t(rng.uniform(size=(3, 3)) + 3 * np.eye(3), device)
            x = _t(rng.standard_normal(8), device)
            for ours, eager in zip(compiled(a, x), step(a, x)):
                np.testing.assert_allclose(ours.to_numpy(), eager.to_numpy(), rtol=1e-10, atol=1e-12)
    assert compiled.stats["traces"] == 1 and compiled.stats["replays"] == 2 and not compiled.stats["eager"]
    (entry,) = compiled._entries.values()
    calls = [(node.op, str(node.args[0])) for node in entry.graph.nodes if node.op in ("linalg", "fft")]
    assert {op for _, op in calls} >= {"svdvals", "solve", "svd", "rfft"}, calls
