"""flex's fused kernels (exact GELU, the ReLU gradient, layer norm, cross entropy, softmax, attention's
backward) against the composites they replace and against PyTorch: values and
gradients, on the native (llvmlite) path and on the numpy path, special values, and
the float32 ``erf``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ember import Device, Tensor
from ember.backend.flex import native
from ember.backend.flex.backend import FlexBackend
from ember.backend.flex.special import erf
from ember.errors import IndexOutOfBoundsError
from ember.nn.loss import CrossEntropyLoss
from ember.tensor import activation as F
from ember.tensor.attention import attention
from ember.tensor.norm import layer_norm


@pytest.fixture(params=["native", "numpy"])
def path(request, monkeypatch):
    """Runs a test on flex's native kernels and again on its numpy versions."""
    kernels = native.kernels()
    if request.param == "numpy":
        monkeypatch.setitem(native._STATE, "kernels", None)
    elif kernels is None:
        pytest.skip("native kernels are unavailable on this machine")
    else:
        monkeypatch.setattr(native, "MIN_ELEMENTS", 0)  # the tests' small arrays take the native path too
    return request.param


def composite(monkeypatch, *names):
    """Makes flex report no fused kernel for ``names`` (the composite then runs)."""
    for name in names:
        monkeypatch.setattr(FlexBackend, name, lambda self, *args, **kwargs: NotImplemented)


def values_and_grads(fn, arrays, seed=0, dtype=np.float32):
    device = Device.flex().autodiff()
    tensors = [Tensor.from_data(a.astype(dtype), device=device).require_grad() for a in arrays]
    out = fn(*tensors)
    weights = np.random.default_rng(seed).standard_normal(out.dims()).astype(dtype)
    grads = out.mul(Tensor.from_data(weights, device=device)).sum().backward()
    return out.to_numpy(), [t.grad(grads).to_numpy() for t in tensors], weights


def test_small_arrays_skip_the_native_kernels():
    """Below MIN_ELEMENTS the numpy versions run (no compilation for small tensors)."""
    assert native.kernels(native.MIN_ELEMENTS - 1) is None
    assert native.kernels(native.MIN_ELEMENTS) is native.kernels()


def test_erf_float32_accuracy():
    x = np.concatenate([np.linspace(-7, 7, 20001), np.geomspace(1e-30, 0.7, 300), -np.geomspace(1e-30, 0.7, 300)])
    x = x.astype(np.float32)
    exact = np.array([math.erf(float(v)) for v in x])
    got = erf(x).astype(np.float64)
    assert np.abs(got - exact).max() < 5e-7
    near = (np.abs(x) < 0.5) & (x != 0)
    assert (np.abs(got - exact)[near] / np.abs(exact[near])).max() < 2e-6  # relative near 0
    special = erf(np.array([0.0, -0.0, np.inf, -np.inf, np.nan], np.float32))
    assert special[:4].tolist() == [0.0, -0.0, 1.0, -1.0] and math.copysign(1, special[1]) < 0
    assert np.isnan(special[4])


def test_gelu_matches_torch_and_the_composite(path, torch, monkeypatch):
    x = np.random.default_rng(1).standard_normal((4, 7, 33)) * 4
    x.reshape(-1)[:6] = [0.0, 20.0, -20.0, 1e-20, -9.0, 9.0]
    out, (grad,), weights = values_and_grads(F.gelu, [x])
    tx = torch.tensor(x.astype(np.float32).astype(np.float64), requires_grad=True)
    expected = torch.nn.functional.gelu(tx)
    expected.backward(torch.from_numpy(weights.astype(np.float64)))
    np.testing.assert_allclose(out, expected.detach().numpy(), rtol=2e-6, atol=5e-7)
    np.testing.assert_allclose(grad, tx.grad.numpy(), rtol=2e-6, atol=2e-6)
    composite(monkeypatch, "gelu", "gelu_backward")
    out_c, (grad_c,), _ = values_and_grads(F.gelu, [x])
    np.testing.assert_allclose(out, out_c, rtol=2e-6, atol=5e-7)
    np.testing.assert_allclose(grad, grad_c, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_gradient_matches_torch_and_the_composite_bit_for_bit(path, torch, monkeypatch, dtype):
    """The native kernel (float32) or the composite (float64, the numpy path): the
    same bits as the composite's select, and torch's gradient (0 at 0) but where the
    input is NaN (ember's rule gives 0 there, torch passes the gradient through)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 5, 41))
    x.reshape(-1)[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40]
    out, (grad,), weights = values_and_grads(F.relu, [x], dtype=dtype)
    tx = torch.tensor(x.astype(dtype), requires_grad=True)
    torch.relu(tx).backward(torch.from_numpy(weights))
    expected = tx.grad.numpy()
    assert grad.reshape(-1)[4] == 0.0  # the NaN input
    np.testing.assert_array_equal(grad.reshape(-1)[5:], expected.reshape(-1)[5:])
    np.testing.assert_array_equal(grad.reshape(-1)[:4], expected.reshape(-1)[:4])
    special = np.array([1.0, np.nan, np.inf, -0.0, -2.0, 3.0], dtype)
    flex = FlexBackend()
    out_values, grads = np.maximum(special, 0.0), np.array([np.nan, 1.0, -np.inf, 5.0, 6.0, -0.0], dtype)
    fused = flex.relu_backward(np.tile(out_values, 3000), np.tile(grads, 3000))
    expected = np.where(np.tile(out_values, 3000) > 0, np.tile(grads, 3000), 0.0).astype(dtype)
    if fused is NotImplemented:
        assert dtype == np.float64 or path == "numpy"
    else:
        np.testing.assert_array_equal(fused.view(np.uint8), expected.view(np.uint8))
    monkeypatch.setattr(native, "MIN_ELEMENTS", 1 << 30)
    small = flex.relu_backward(out_values, grads)  # below the native size: one numpy select
    small_expected = np.where(out_values > 0, grads, 0.0).astype(dtype)
    np.testing.assert_array_equal(small.view(np.uint8), small_expected.view(np.uint8))
    assert flex.relu_backward(out_values, grads.astype(np.float16)) is NotImplemented  # mixed dtypes: composite
    composite(monkeypatch, "relu_backward")
    _, (grad_c,), _ = values_and_grads(F.relu, [x], dtype=dtype)
    np.testing.assert_array_equal(grad.view(np.uint8), grad_c.view(np.uint8))


def test_gelu_special_values_as_torch(path, torch):
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -50.0, 50.0], np.float32)
    got = F.gelu(Tensor.from_data(x)).to_numpy()
    expected = torch.nn.functional.gelu(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    finite = ~np.isnan(expected)
    np.testing.assert_allclose(got[finite], expected[finite], atol=0)


def test_gelu_backward_fallback_for_a_backend_without_it(monkeypatch, torch):
    """A backend with a fused forward but no backward kernel gets the rule's composite."""
    composite(monkeypatch, "gelu_backward")
    x = np.random.default_rng(2).standard_normal((5, 6))
    _, (grad,), weights = values_and_grads(F.gelu, [x])
    tx = torch.tensor(x.astype(np.float32).astype(np.float64), requires_grad=True)
    torch.nn.functional.gelu(tx).backward(torch.from_numpy(weights.astype(np.float64)))
    np.testing.assert_allclose(grad, tx.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("affine", ["both", "gamma", "none"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_matches_torch_and_the_composite(path, torch, monkeypatch, affine, dtype):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 5, 24)) * 3 + 1.5
    gamma, beta = rng.standard_normal(24), rng.standard_normal(24)
    arrays = [x] + ([gamma] if affine != "none" else []) + ([beta] if affine == "both" else [])

    def fn(x, gamma=None, beta=None):
        return layer_norm(x, gamma, beta, 1e-5)

    out, grads, weights = values_and_grads(fn, arrays, dtype=dtype)
    tensors = [torch.tensor(a.astype(dtype).astype(np.float64), requires_grad=True) for a in arrays]
    expected = torch.nn.functional.layer_norm(tensors[0], (24,), *tensors[1:], eps=1e-5)
    expected.backward(torch.from_numpy(weights.astype(np.float64)))
    tol = {"rtol": 1e-4, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-10, "atol": 1e-10}
    np.testing.assert_allclose(out, expected.detach().numpy(), **tol)
    for got, t in zip(grads, tensors):
        np.testing.assert_allclose(got, t.grad.numpy(), **tol)
    composite(monkeypatch, "layer_norm")
    out_c, grads_c, _ = values_and_grads(fn, arrays, dtype=dtype)
    np.testing.assert_allclose(out, out_c, **tol)
    for a, b in zip(grads, grads_c):
        np.testing.assert_allclose(a, b, **tol)


def test_layer_norm_of_a_constant_row_is_beta(path):
    x = Tensor.from_data(np.full((2, 8), 3.0, np.float32))
    beta = Tensor.from_data(np.arange(8, dtype=np.float32))
    out = layer_norm(x, Tensor.ones([8]), beta)
    np.testing.assert_allclose(out.to_numpy(), np.tile(np.arange(8, dtype=np.float32), (2, 1)), atol=1e-6)


def test_cross_entropy_matches_torch_and_the_composite(torch, monkeypatch):
    rng = np.random.default_rng(4)
    logits = rng.standard_normal((3, 10, 7)).astype(np.float32) * 4
    targets = rng.integers(0, 7, (3, 10))
    device = Device.flex().autodiff()

    def run():
        x = Tensor.from_data(logits, device=device).require_grad()
        loss = CrossEntropyLoss()(x.reshape([-1, 7]), Tensor.from_data(targets, device=device).reshape([-1]))
        return loss.to_numpy(), x.grad(loss.backward()).to_numpy()

    loss, grad = run()
    tx = torch.tensor(logits.astype(np.float64), requires_grad=True)
    expected = torch.nn.functional.cross_entropy(tx.reshape(-1, 7), torch.from_numpy(targets).reshape(-1))
    expected.backward()
    np.testing.assert_allclose(loss, [expected.item()], rtol=1e-6)
    np.testing.assert_allclose(grad, tx.grad.numpy(), rtol=1e-5, atol=1e-7)
    composite(monkeypatch, "cross_entropy")
    loss_c, grad_c = run()
    np.testing.assert_allclose(loss, loss_c, rtol=1e-6)
    np.testing.assert_allclose(grad, grad_c, rtol=1e-5, atol=1e-7)


def test_cross_entropy_backward_fallback(monkeypatch, torch):
    composite(monkeypatch, "cross_entropy_backward")
    logits = np.random.default_rng(5).standard_normal((6, 4)).astype(np.float32)
    targets = np.array([0, 3, 1, 1, 2, 3])
    x = Tensor.from_data(logits, device=Device.flex().autodiff()).require_grad()
    loss = CrossEntropyLoss()(x, Tensor.from_data(targets, device=x.device))
    tx = torch.tensor(logits, requires_grad=True)
    torch.nn.functional.cross_entropy(tx, torch.from_numpy(targets)).backward()
    np.testing.assert_allclose(x.grad(loss.backward()).to_numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_cross_entropy_target_out_of_range_names_it():
    with pytest.raises(IndexOutOfBoundsError, match="target 9 is out of bounds for 4 classes"):
        CrossEntropyLoss()(Tensor.zeros([2, 4]), Tensor.from_ints([1, 9]))


def test_softmax_rows_special_values(path):
    x = np.array([[1, np.nan, 2], [-np.inf] * 3, [np.inf, 1, 2], [0, -np.inf, 1], [1000, 0, -1000]], np.float32)
    got = F.softmax(Tensor.from_data(x), 1).to_numpy()
    with np.errstate(all="ignore"):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        expected = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)  # NaN where numpy gives NaN


def test_softmax_last_dim_matches_torch(path, torch):
    x = np.random.default_rng(6).standard_normal((5, 9, 70)).astype(np.float32) * 10
    got = F.softmax(Tensor.from_data(x), -1).to_numpy()
    np.testing.assert_allclose(got, torch.softmax(torch.from_numpy(x).double(), -1).numpy(), rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("case", ["mask", "causal", "bias", "fully_hidden", "far_rows"])
def test_attention_backward_kernel_matches_the_composite_rule(path, monkeypatch, case):
    rng = np.random.default_rng(7)
    q, k, v = rng.standard_normal((2, 3, 6, 8)), rng.standard_normal((2, 3, 6, 8)), rng.standard_normal((2, 3, 6, 5))
    if case == "far_rows":  # rows whose maxima lie far below the array's (the numpy path's slow rows)
        q[0, 0] *= 40.0
    device = Device.flex().autodiff()
    mask = rng.random((2, 1, 6, 6)) > 0.7
    if case == "fully_hidden":
        mask[:, :, 3] = True

    def run():
        ts = [Tensor.from_data(a.astype(np.float32), device=device).require_grad() for a in (q, k, v)]
        options = {}
        if case in ("mask", "fully_hidden"):
            options = {"mask": Tensor.from_data(mask, device=device), "fill": -1.0e4}
        elif case == "causal":
            options = {"causal": True}
        elif case == "bias":
            options = {"bias": Tensor.from_data(rng_bias, device=device).require_grad()}
            ts.append(options["bias"])
        context, _ = attention(*ts[:3], **options)
        w = np.random.default_rng(8).standard_normal(context.dims()).astype(np.float32)
        grads = context.mul(Tensor.from_data(w, device=device)).sum().backward()
        return [context.to_numpy()] + [t.grad(grads).to_numpy() for t in ts]

    rng_bias = rng.standard_normal((3, 6, 6)).astype(np.float32)
    fused = run()
    composite(monkeypatch, "attention_backward")
    expected = run()
    for a, b in zip(fused, expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
