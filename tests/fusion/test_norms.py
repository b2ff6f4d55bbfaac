"""Layer norm on the LLVM executor: ``layer_norm`` and ``layer_norm_backward`` of float32
values as one row pass each (:mod:`ember.backend.fusion.llvm.norms`), against flex's
kernels (the replay), the composites (:mod:`ember.backend.composites.norm`, run on
flex), a float64 numpy oracle and torch: values, gradients and special values (rows
with inf or NaN, rows of zero variance)."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import ember
from ember import Device, Tensor
from ember.backend.composites import COMPOSITES
from ember.backend.flex import FlexBackend
from ember.backend.fusion.llvm import LLVMExecutor
from ember.backend.fusion.scheduler import Call, Library
from ember.tensor.norm import layer_norm
from tests.fusion.oracle import Case, assert_same

F32 = np.dtype(np.float32)
EPS = 1e-5


@pytest.fixture(scope="module")
def executor():
    return LLVMExecutor()


def _libraries(plan) -> list[str]:
    steps = plan.schedule.steps
    assert not any(isinstance(s, Call) for s in steps), "a step left to the backend"
    return [s.node.op for s in steps if isinstance(s, Library)]


def _oracle(x, gamma, beta):
    x = x.astype(np.float64)
    mean = x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + EPS)
    out = (x - mean) * rstd
    out = out if gamma is None else out * gamma
    return (out if beta is None else out + beta), mean, rstd


def _oracle_backward(x, gamma, grad):
    """dx, dgamma, dbeta from the float64 statistics."""
    _, mean, rstd = _oracle(x, None, None)
    xhat = (x - mean) * rstd
    h = grad if gamma is None else grad * gamma
    dx = rstd * (h - h.mean(-1, keepdims=True) - xhat * (h * xhat).mean(-1, keepdims=True))
    d = x.shape[-1]
    return dx, (grad * xhat).reshape(-1, d).sum(0), grad.reshape(-1, d).sum(0)


@pytest.mark.parametrize("shape", [(3, 7), (2, 3, 64), (5, 1), (4, 65), (1, 300)], ids=str)
@pytest.mark.parametrize("params", ["affine", "gamma only", "none"])
def test_layer_norm_matches_flex_its_composite_and_a_float64_oracle(executor, shape, params, rng):
    x_np = (rng.standard_normal(shape) * 3 + 1).astype(F32)
    g_np = rng.standard_normal(shape[-1]).astype(F32) if params != "none" else None
    b_np = rng.standard_normal(shape[-1]).astype(F32) if params == "affine" else None
    case = Case()
    x = case.input(x_np)
    g = None if g_np is None else case.input(g_np)
    b = None if b_np is None else case.input(b_np)
    outs = list(case.ops.layer_norm(x, g, b, EPS))
    compiled, replayed, plan = case.run(executor, outs)
    assert _libraries(plan) == ["layer_norm"]
    composite = COMPOSITES["layer_norm"](FlexBackend(), x_np, g_np, b_np, EPS)
    for name, got, flex, comp, oracle in zip(
        ("out", "mean", "rstd"), compiled, replayed, composite, _oracle(x_np, g_np, b_np)
    ):
        assert_same(got, flex, name, rtol=2e-6, atol=2e-6)
        assert_same(got, np.asarray(comp, F32), name, rtol=2e-6, atol=2e-6)
        np.testing.assert_allclose(got, oracle, rtol=2e-5, atol=2e-6, err_msg=name)


@pytest.mark.parametrize("shape", [(3, 7), (2, 3, 64), (5, 1), (4, 65)], ids=str)
@pytest.mark.parametrize(
    ("need_x", "need_gamma", "need_beta", "with_gamma"),
    [(True, True, True, True), (True, False, False, True), (False, True, True, True), (True, False, True, False)],
    ids=["all", "dx only", "params only", "no gamma"],
)
def test_layer_norm_backward_matches_flex_its_composite_and_a_float64_oracle(
    executor, shape, need_x, need_gamma, need_beta, with_gamma, rng
):
    x_np = (rng.standard_normal(shape) * 2 - 1).astype(F32)
    g_np = rng.standard_normal(shape[-1]).astype(F32) if with_gamma else None
    grad_np = rng.standard_normal(shape).astype(F32)
    _, mean_np, rstd_np = COMPOSITES["layer_norm"](FlexBackend(), x_np, None, None, EPS)
    case = Case()
    x, grad = case.input(x_np), case.input(grad_np)
    g = None if g_np is None else case.input(g_np)
    mean, rstd = case.input(np.asarray(mean_np, F32)), case.input(np.asarray(rstd_np, F32))
    result = case.ops.layer_norm_backward(x, g, mean, rstd, grad, need_x, need_gamma, need_beta)
    outs = [r for r in result if r is not None]
    compiled, replayed, plan = case.run(executor, outs)
    assert _libraries(plan) == ["layer_norm_backward"]
    composite = COMPOSITES["layer_norm_backward"](
        FlexBackend(), x_np, g_np, mean_np, rstd_np, grad_np, need_x, need_gamma, need_beta
    )
    oracle = _oracle_backward(x_np.astype(np.float64), g_np, grad_np.astype(np.float64))
    wanted = [(n, c, o) for n, c, o, r in zip(("dx", "dgamma", "dbeta"), composite, oracle, result) if r is not None]
    assert len(wanted) == len(compiled)
    for (name, comp, expected), got, flex in zip(wanted, compiled, replayed):
        assert_same(got, flex, name, rtol=1e-5, atol=1e-5)
        assert_same(got, np.asarray(comp, F32), name, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5, err_msg=name)


def test_special_rows_match_flex_and_its_composite(executor, rng):
    inf, nan = np.inf, np.nan
    x_np = np.array(
        [
            [1.0, 2.0, 3.0, 4.0],
            [5.0, 5.0, 5.0, 5.0],  # zero variance: rstd = 1 / sqrt(epsilon)
            [0.0, -0.0, 0.0, -0.0],
            [nan, 0.0, 1.0, 2.0],
            [inf, 0.0, 1.0, 2.0],
            [-inf, inf, 0.0, 1.0],
            [1e18, 3e18, -2e18, 5e18],  # squares near float32's largest
            [1e-40, -1e-40, 3e-41, 0.0],  # subnormals
        ],
        F32,
    )
    g_np = np.array([1.0, -2.0, 0.5, 3.0], F32)
    b_np = np.array([0.1, 0.0, -0.3, 1.0], F32)
    grad_np = rng.standard_normal(x_np.shape).astype(F32)
    case = Case()
    x, g, b, grad = (case.input(a) for a in (x_np, g_np, b_np, grad_np))
    out, mean, rstd = case.ops.layer_norm(x, g, b, EPS)
    dx, dg, db = case.ops.layer_norm_backward(x, g, mean, rstd, grad, True, True, True)
    compiled, replayed, plan = case.run(executor, [out, mean, rstd, dx, dg, db])
    assert sorted(_libraries(plan)) == ["layer_norm", "layer_norm_backward"]
    flex = FlexBackend()
    with np.errstate(all="ignore"):
        composite = COMPOSITES["layer_norm"](flex, x_np, g_np, b_np, EPS)
        composite += COMPOSITES["layer_norm_backward"](flex, x_np, g_np, *composite[1:], grad_np, True, True, True)
        expected = _oracle(x_np, g_np, b_np)
    names = ("out", "mean", "rstd", "dx", "dgamma", "dbeta")
    for name, got, ref, comp in zip(names, compiled, replayed, composite):
        assert_same(got, ref, name, rtol=1e-5, atol=1e-5)
        assert_same(got, np.asarray(comp, F32), name, rtol=1e-5, atol=1e-5)
    # A row of equal values normalises to beta exactly; its statistics are the oracle's.
    np.testing.assert_array_equal(compiled[0][1], b_np)
    np.testing.assert_allclose(compiled[2][1], expected[2][1], rtol=1e-6)
    assert np.isnan(compiled[0][3:6]).all() and np.isnan(compiled[3][3:6]).all()
    assert np.isfinite(compiled[0][[0, 1, 2, 6, 7]]).all()


def _step(x, gamma, beta):
    y = layer_norm(x, gamma, beta, EPS)
    loss = y.mul(y).mul(x).sum()
    grads = loss.backward()
    return y, x.grad(grads), gamma.grad(grads), beta.grad(grads)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_compiled_layer_norm_and_its_gradients_match_eager_and_torch(dtype, rng, torch):
    x_np = (rng.standard_normal((4, 5, 33)) * 2 + 0.5).astype(dtype)
    g_np, b_np = (rng.standard_normal(33).astype(dtype) for _ in range(2))
    device = Device.flex().autodiff()
    x, g, b = (Tensor.from_data(a, device=device).require_grad() for a in (x_np, g_np, b_np))
    compiled = ember.compile(_step)
    for _ in range(3):  # traced, then planned, then run compiled
        got = [t.to_data().to_numpy() for t in compiled(x, g, b)]
    eager = [t.to_data().to_numpy() for t in _step(x, g, b)]
    tol = 2e-5 if dtype == np.float32 else 1e-12
    for name, c, e in zip(("y", "dx", "dgamma", "dbeta"), got, eager):
        np.testing.assert_allclose(c, e, rtol=tol, atol=tol, err_msg=name)

    xt, gt, bt = (torch.tensor(a, requires_grad=True) for a in (x_np, g_np, b_np))
    yt = torch.nn.functional.layer_norm(xt, (33,), gt, bt, EPS)
    (yt * yt * xt).sum().backward()
    expected = (yt.detach().numpy(), xt.grad.numpy(), gt.grad.numpy(), bt.grad.numpy())
    tol = 1e-4 if dtype == np.float32 else 1e-10
    for name, c, t in zip(("y", "dx", "dgamma", "dbeta"), got, expected):
        np.testing.assert_allclose(c, t, rtol=tol, atol=tol, err_msg=name)

    entry = next(iter(compiled._entries.values()))
    ops = collections.Counter(n.op for n in entry.graph.nodes)
    assert ops["layer_norm"] == 1 and ops["layer_norm_backward"] == 1 and ops["reduce"] == 0
    steps = entry.plan.variants[-1].schedule.steps
    library = sorted(s.node.op for s in steps if isinstance(s, Library))
    expected_library = ["layer_norm", "layer_norm_backward"] if dtype == np.float32 else []  # float64: expanded
    assert library == expected_library
    assert not any(isinstance(s, Call) for s in steps)


def test_a_fusion_device_runs_layer_norm_with_its_epsilon_at_run_time(rng):
    x_np = rng.standard_normal((6, 16)).astype(F32)
    g_np, b_np = rng.standard_normal(16).astype(F32), rng.standard_normal(16).astype(F32)
    device = Device.flex().fusion()
    args = [Tensor.from_data(a, device=device) for a in (x_np, g_np, b_np)]
    out = layer_norm(*args, 1e-6).to_data().to_numpy()
    eager = layer_norm(*(Tensor.from_data(a) for a in (x_np, g_np, b_np)), 1e-6).to_data().to_numpy()
    np.testing.assert_allclose(out, eager, rtol=2e-6, atol=2e-6)


# ---------------------------------------------------------------------- RMS norm
def _rms_oracle(x, gamma):
    x = x.astype(np.float64)
    rstd = 1.0 / np.sqrt((x * x).mean(-1, keepdims=True) + EPS)
    return (x * rstd if gamma is None else x * rstd * gamma), rstd


@pytest.mark.parametrize("shape", [(3, 7), (2, 3, 64), (5, 1), (4, 65), (1, 300)], ids=str)
@pytest.mark.parametrize("with_gamma", [True, False], ids=["gamma", "no gamma"])
def test_rms_norm_and_its_backward_match_the_composites_and_a_float64_oracle(executor, shape, with_gamma, rng):
    x_np = (rng.standard_normal(shape) * 3 + 1).astype(F32)
    g_np = rng.standard_normal(shape[-1]).astype(F32) if with_gamma else None
    grad_np = rng.standard_normal(shape).astype(F32)
    case = Case()
    x, grad = case.input(x_np), case.input(grad_np)
    g = None if g_np is None else case.input(g_np)
    out, rstd = case.ops.rms_norm(x, g, EPS)
    backward = [r for r in case.ops.rms_norm_backward(x, g, rstd, grad, True, True) if r is not None]
    compiled, replayed, plan = case.run(executor, [out, rstd, *backward])
    assert sorted(_libraries(plan)) == ["rms_norm", "rms_norm_backward"]
    flex = FlexBackend()
    composite = list(COMPOSITES["rms_norm"](flex, x_np, g_np, EPS))
    composite += [
        r for r in COMPOSITES["rms_norm_backward"](flex, x_np, g_np, composite[1], grad_np, True, True) if r is not None
    ]
    expected_out, expected_rstd = _rms_oracle(x_np, g_np)
    xhat = x_np.astype(np.float64) * expected_rstd
    h = grad_np if g_np is None else grad_np * g_np.astype(np.float64)
    expected = [expected_out, expected_rstd, expected_rstd * (h - xhat * (h * xhat).mean(-1, keepdims=True))]
    if with_gamma:
        expected.append((grad_np * xhat).reshape(-1, shape[-1]).sum(0))
    names = ("out", "rstd", "dx", "dgamma")
    assert len(compiled) == len(expected)
    for name, got, ref, comp, want in zip(names, compiled, replayed, composite, expected):
        assert_same(got, ref, name, rtol=1e-5, atol=1e-5)
        assert_same(got, np.asarray(comp, F32), name, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=name)


def test_rms_norm_special_rows_match_its_composite(executor, rng):
    x_np = np.array(
        [
            [1.0, 2.0, 3.0, 4.0],
            [0.0, -0.0, 0.0, -0.0],  # all zeros: rstd = 1 / sqrt(epsilon), out 0
            [np.nan, 0.0, 1.0, 2.0],
            [np.inf, 0.0, 1.0, 2.0],
            [1e18, 3e18, -2e18, 5e18],
            [1e-40, -1e-40, 3e-41, 0.0],
        ],
        F32,
    )
    g_np = np.array([1.0, -2.0, 0.5, 3.0], F32)
    grad_np = rng.standard_normal(x_np.shape).astype(F32)
    case = Case()
    x, g, grad = (case.input(a) for a in (x_np, g_np, grad_np))
    out, rstd = case.ops.rms_norm(x, g, EPS)
    dx, dg = case.ops.rms_norm_backward(x, g, rstd, grad, True, True)
    compiled, replayed, plan = case.run(executor, [out, rstd, dx, dg])
    assert sorted(_libraries(plan)) == ["rms_norm", "rms_norm_backward"]
    flex = FlexBackend()
    with np.errstate(all="ignore"):
        composite = list(COMPOSITES["rms_norm"](flex, x_np, g_np, EPS))
        composite += COMPOSITES["rms_norm_backward"](flex, x_np, g_np, composite[1], grad_np, True, True)
    for name, got, ref, comp in zip(("out", "rstd", "dx", "dgamma"), compiled, replayed, composite):
        assert_same(got, ref, name, rtol=1e-5, atol=1e-5)
        assert_same(got, np.asarray(comp, F32), name, rtol=1e-5, atol=1e-5)
    assert (compiled[0][1] == 0).all() and np.isfinite(compiled[2][1]).all()
    np.testing.assert_allclose(compiled[1][1], 1 / np.sqrt(np.float32(EPS)), rtol=1e-6)
    assert np.isnan(compiled[0][2]).all() and np.isnan(compiled[2][2]).all()  # NaN spreads through the row
    assert np.isnan(compiled[0][3, 0]) and (compiled[0][3, 1:] == 0).all()  # rstd 0: inf * 0, as torch


def _rms_step(model, x):
    y = model(x)
    loss = y.mul(y).mul(x).sum()
    grads = loss.backward()
    return y, x.grad(grads), model.gamma.val().grad(grads)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_a_compiled_rms_norm_layer_matches_eager_and_torch(dtype, rng, torch):
    from ember.module import Param
    from ember.nn import RmsNorm

    x_np = (rng.standard_normal((4, 5, 33)) * 2 + 0.5).astype(dtype)
    g_np = rng.standard_normal(33).astype(dtype)
    device = Device.flex().autodiff()
    model = RmsNorm(gamma=Param.from_tensor(Tensor.from_data(g_np, device=device)), epsilon=EPS)
    x = Tensor.from_data(x_np, device=device).require_grad()
    compiled = ember.compile(_rms_step)
    for _ in range(3):
        got = [t.to_data().to_numpy() for t in compiled(model, x)]
    eager = [t.to_data().to_numpy() for t in _rms_step(model, x)]
    tol = 2e-5 if dtype == np.float32 else 1e-12
    for name, c, e in zip(("y", "dx", "dgamma"), got, eager):
        np.testing.assert_allclose(c, e, rtol=tol, atol=tol, err_msg=name)

    xt, gt = torch.tensor(x_np, requires_grad=True), torch.tensor(g_np, requires_grad=True)
    yt = torch.nn.functional.rms_norm(xt, (33,), gt, EPS)
    (yt * yt * xt).sum().backward()
    tol = 1e-4 if dtype == np.float32 else 1e-10
    for name, c, t in zip(("y", "dx", "dgamma"), got, (yt.detach().numpy(), xt.grad.numpy(), gt.grad.numpy())):
        np.testing.assert_allclose(c, t, rtol=tol, atol=tol, err_msg=name)

    entry = next(iter(compiled._entries.values()))
    ops = collections.Counter(n.op for n in entry.graph.nodes)
    assert ops["rms_norm"] == 1 and ops["rms_norm_backward"] == 1 and ops["reduce"] == 0
    steps = entry.plan.variants[-1].schedule.steps
    library = sorted(s.node.op for s in steps if isinstance(s, Library))
    assert library == (["rms_norm", "rms_norm_backward"] if dtype == np.float32 else [])
    assert not any(isinstance(s, Call) for s in steps)
