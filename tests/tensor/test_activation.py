"""Activations against float64 numpy formulas and torch.nn.functional."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ember import Tensor
from ember.errors import ShapeError
from ember.tensor import activation as A
from tests.conftest import assert_close, float64_supported

_erf = np.vectorize(math.erf)


def _softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


ORACLES = {
    "relu": (A.relu, lambda x: np.maximum(x, 0)),
    "leaky_relu": (lambda t: A.leaky_relu(t, 0.1), lambda x: np.where(x >= 0, x, 0.1 * x)),
    "relu6": (A.relu6, lambda x: np.clip(x, 0, 6)),
    "sigmoid": (A.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "softplus": (A.softplus, _softplus),
    "log_sigmoid": (A.log_sigmoid, lambda x: -_softplus(-x)),
    "tanh": (A.tanh, np.tanh),
    "silu": (A.silu, lambda x: x / (1 + np.exp(-x))),
    "gelu": (A.gelu, lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2)))),
    "gelu_tanh": (A.gelu_tanh, lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))),
    "mish": (A.mish, lambda x: x * np.tanh(_softplus(x))),
    "elu": (lambda t: A.elu(t, 0.7), lambda x: np.where(x > 0, x, 0.7 * np.expm1(x))),
    "selu": (A.selu, lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(x))),
    "celu": (lambda t: A.celu(t, 2.0), lambda x: np.maximum(x, 0) + np.minimum(0, 2.0 * np.expm1(x / 2.0))),
    "hard_sigmoid": (A.hard_sigmoid, lambda x: np.clip(0.2 * x + 0.5, 0, 1)),
    "hard_swish": (A.hard_swish, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "hard_tanh": (A.hard_tanh, lambda x: np.clip(x, -1, 1)),
}


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_activation_matches_formula(device, rng, name):
    fn, oracle = ORACLES[name]
    x = rng.uniform(-6, 6, size=(4, 7))
    out = fn(Tensor.from_data(x.astype(np.float32), device=device))
    assert_close(out, oracle(x.astype(np.float32).astype(np.float64)), rtol=1e-5, atol=2e-6)
    if not float64_supported(device):
        return
    out64 = fn(Tensor.from_data(x, device=device))
    assert_close(out64, oracle(x), rtol=1e-12, atol=1e-12)


def test_extreme_inputs_stay_finite(device):
    x = Tensor.from_floats([-1000.0, -50.0, 0.0, 50.0, 1000.0], device=device)
    for fn in (A.sigmoid, A.softplus, A.log_sigmoid, A.silu, A.mish, A.elu, A.gelu):
        values = fn(x).to_numpy()
        assert np.all(np.isfinite(values)), fn.__name__
    assert A.sigmoid(x).tolist()[0] == 0.0 and A.sigmoid(x).tolist()[-1] == 1.0


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_family(device, rng, dim):
    if not float64_supported(device):
        return
    x = rng.standard_normal((3, 5)) * 20
    t = Tensor.from_data(x, device=device)
    shifted = x - x.max(dim, keepdims=True)
    expected = np.exp(shifted) / np.exp(shifted).sum(dim, keepdims=True)
    assert_close(A.softmax(t, dim), expected, rtol=1e-12, atol=1e-14)
    assert_close(A.log_softmax(t, dim), np.log(expected), rtol=1e-10, atol=1e-10)
    neg = -x - (-x).max(dim, keepdims=True)
    assert_close(A.softmin(t, dim), np.exp(neg) / np.exp(neg).sum(dim, keepdims=True), rtol=1e-12, atol=1e-14)
    m = np.maximum(x.max(dim, keepdims=True), 0)
    quiet = np.exp(x - m) / (np.exp(-m) + np.exp(x - m).sum(dim, keepdims=True))
    assert_close(A.quiet_softmax(t, dim), quiet, rtol=1e-12, atol=1e-14)
    small = Tensor.from_data(np.full((2, 3), -50.0), device=device)
    assert np.all(A.quiet_softmax(small, 1).to_numpy().sum(1) < 1e-20)


def test_prelu_and_glu(device, rng):
    if not float64_supported(device):
        return
    x = rng.standard_normal((2, 3, 4))
    alpha = np.array([0.1, 0.2, 0.3])
    out = A.prelu(Tensor.from_data(x, device=device), Tensor.from_data(alpha, device=device))
    assert_close(out, np.where(x >= 0, x, alpha[None, :, None] * x))
    glu = A.glu(Tensor.from_data(x, device=device), -1)
    assert_close(glu, x[..., :2] / (1 + np.exp(-x[..., 2:])))
    with pytest.raises(ShapeError):
        A.prelu(Tensor.from_data(x, device=device), Tensor.from_floats([0.1, 0.2], device=device))
    with pytest.raises(ShapeError):
        A.glu(Tensor.from_data(x[..., :3], device=device))


@pytest.mark.torch
def test_activations_match_torch(device, rng, torch):
    F = torch.nn.functional
    x = rng.uniform(-5, 5, size=(6, 8)).astype(np.float32)
    t = Tensor.from_data(x, device=device)
    tx = torch.from_numpy(x)
    pairs = [
        (A.relu(t), F.relu(tx)),
        (A.gelu(t), F.gelu(tx)),
        (A.gelu(t, "tanh"), F.gelu(tx, approximate="tanh")),
        (A.silu(t), F.silu(tx)),
        (A.mish(t), F.mish(tx)),
        (A.softplus(t, beta=2.0), F.softplus(tx, beta=2.0)),
        (A.elu(t, 0.5), F.elu(tx, 0.5)),
        (A.selu(t), F.selu(tx)),
        (A.celu(t, 1.5), F.celu(tx, 1.5)),
        (A.hard_sigmoid(t, 1 / 6, 0.5), F.hardsigmoid(tx)),
        (A.hard_swish(t), F.hardswish(tx)),
        (A.log_sigmoid(t), F.logsigmoid(tx)),
        (A.softmax(t, 1), F.softmax(tx, 1)),
        (A.log_softmax(t, 0), F.log_softmax(tx, 0)),
        (A.glu(t, 1), F.glu(tx, 1)),
    ]
    for ours, theirs in pairs:
        assert_close(ours, theirs.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape,dim", [((2, 0), 1), ((0, 3), 0), ((0, 3), 1), ((2, 0, 3), 1)])
def test_softmax_over_empty_dims_is_empty_as_in_torch(device, torch, shape, dim):
    x = Tensor.zeros(list(shape), device=device)
    for fn, theirs in (
        (A.softmax, torch.softmax),
        (A.log_softmax, torch.log_softmax),
        (A.softmin, torch.nn.functional.softmin),
    ):
        out = fn(x, dim)
        assert out.dims() == list(theirs(torch.zeros(shape), dim).shape) and out.num_elements() == 0
    assert A.quiet_softmax(x, dim).dims() == list(shape)
    expected = torch.logsumexp(torch.zeros(shape), dim, keepdim=True).numpy()
    assert_close(x.logsumexp(dim), expected)
