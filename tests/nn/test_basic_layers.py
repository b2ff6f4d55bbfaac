"""Dropout, Embedding, Identity and the activation modules (configs, PRelu
learning, SwiGlu) against torch.nn."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import ConfigError
from ember.nn import (
    Celu,
    Dropout,
    DropoutConfig,
    Elu,
    Embedding,
    EmbeddingConfig,
    Gelu,
    Glu,
    HardSigmoid,
    HardSwish,
    Identity,
    LeakyReluConfig,
    Mish,
    PReluConfig,
    Relu,
    Selu,
    Sigmoid,
    SiLU,
    Softplus,
    SwiGlu,
    SwiGluConfig,
    Tanh,
)
from ember.nn.linear import Linear
from ember.optim import AdamConfig, GradientsParams
from tests.conftest import assert_close, import_torch
from tests.nn.parity import assert_grad, autodiff_of, check_layer, leaf, param, rand, to_torch, weighted_backward


def test_dropout_is_identity_off_autodiff_and_seeded_on_it():
    layer = DropoutConfig(0.4).init()
    x = Tensor.ones([50, 40])
    assert layer(x) is x or np.array_equal(layer(x).to_numpy(), x.to_numpy())
    ad = Device.flex().autodiff()
    ad.seed(7)
    a = layer(Tensor.ones([50, 40], device=ad)).to_numpy()
    ad.seed(7)
    b = layer(Tensor.ones([50, 40], device=ad)).to_numpy()
    np.testing.assert_array_equal(a, b)
    assert abs((a == 0).mean() - 0.4) < 0.03
    np.testing.assert_allclose(a[a != 0], 1 / 0.6, rtol=1e-6)
    with pytest.raises(ConfigError, match=r"prob must lie in \[0, 1\]"):
        DropoutConfig(-0.1)
    assert Dropout(0.0)(Tensor.ones([2], device=ad)).tolist() == [1.0, 1.0]


@pytest.mark.torch
def test_embedding_matches_torch(device):
    torch = import_torch()
    t_layer = torch.nn.Embedding(7, 4)
    ad = autodiff_of(device)
    layer = Embedding(weight=param(t_layer.weight.detach().numpy(), ad))
    idx = np.array([[1, 6, 1], [0, 3, 1]], dtype=np.int64)
    ref = t_layer(torch.from_numpy(idx))
    plain = Embedding(weight=param(t_layer.weight.detach().numpy(), device))
    assert_close(plain(Tensor.from_data(idx, device=device)), ref.detach().numpy())
    grads = weighted_backward(layer(Tensor.from_data(idx, device=ad)), ref)
    assert_grad(layer.weight.val(), grads, t_layer.weight, rtol=1e-6, atol=1e-6)
    # int32 indices and indices on the inner device work too
    assert layer(Tensor.from_data(idx.astype(np.int32), device=ad.inner())).dims() == [2, 3, 4]


def test_embedding_config():
    device = Device.flex()
    device.seed(0)
    layer = EmbeddingConfig(100, 8).init(device)
    w = layer.weight.val().to_numpy()
    assert w.shape == (100, 8) and abs(w.std() - 1.0) < 0.1
    assert "n_embedding: 100, d_model: 8" in repr(layer)
    with pytest.raises(ConfigError, match="must be > 0"):
        EmbeddingConfig(0, 8)


def test_identity():
    x = Tensor.ones([2])
    assert Identity()(x) is x
    assert Identity().num_params() == 0


@pytest.mark.torch
def test_activation_modules_match_torch(device, rng):
    torch = import_torch()
    nn = torch.nn
    x = rand(rng, 4, 6) * 3
    cases = [
        (Relu(), nn.ReLU()),
        (LeakyReluConfig(negative_slope=0.2).init(), nn.LeakyReLU(0.2)),
        (Gelu(), nn.GELU()),
        (Gelu(approximate="tanh"), nn.GELU(approximate="tanh")),
        (Sigmoid(), nn.Sigmoid()),
        (Tanh(), nn.Tanh()),
        (SiLU(), nn.SiLU()),
        (Softplus(beta=2.0, threshold=5.0), nn.Softplus(2.0, 5.0)),
        (Elu(alpha=0.5), nn.ELU(0.5)),
        (Selu(), nn.SELU()),
        (Celu(alpha=1.5), nn.CELU(1.5)),
        (Mish(), nn.Mish()),
        (HardSigmoid(alpha=1 / 6, beta=0.5), nn.Hardsigmoid()),
        (HardSwish(), nn.Hardswish()),
        (Glu(dim=1), nn.GLU(dim=1)),
    ]
    for ours, theirs in cases:
        check_layer(ours, theirs, x, device, rtol=1e-5, atol=1e-5, grad_rtol=1e-4, grad_atol=1e-5, plain=True)


@pytest.mark.torch
def test_prelu_matches_torch_and_learns(rng):
    torch = import_torch()
    ad = Device.flex().autodiff()
    layer = PReluConfig(num_parameters=3, alpha=0.1).init(ad)
    t_layer = torch.nn.PReLU(3, init=0.1)
    x = rand(rng, 5, 3, 2)
    tx = to_torch(x, True)
    ref = t_layer(tx)
    ex = leaf(x, ad)
    grads = weighted_backward(layer(ex), ref)
    assert_grad(ex, grads, tx)
    assert_grad(layer.alpha.val(), grads, t_layer.weight)
    # Learning: fit PReLU's slope to data made with slope -0.7.
    data = Tensor.from_data(rand(rng, 64, 3), device=ad)
    target = data.clamp_min(0.0).add(data.clamp_max(0.0).mul_scalar(-0.7))
    model, optim = PReluConfig(num_parameters=1).init(ad), AdamConfig().init()
    for _ in range(150):
        loss = model(data).sub(target).square().mean()
        model = optim.step(5e-2, model, GradientsParams.from_grads(loss.backward(), model))
    assert abs(model.alpha.val().into_scalar() + 0.7) < 0.05
    with pytest.raises(ConfigError, match="num_parameters must be > 0"):
        PReluConfig(num_parameters=0)


@pytest.mark.torch
def test_swiglu_matches_the_formula(rng):
    torch = import_torch()
    ad = Device.flex().autodiff()
    w1, w2, b1, b2 = rand(rng, 4, 6), rand(rng, 4, 6), rand(rng, 6), rand(rng, 6)
    layer = SwiGlu(
        linear_inner=Linear(weight=param(w1, ad), bias=param(b1, ad)),
        linear_outer=Linear(weight=param(w2, ad), bias=param(b2, ad)),
    )
    x = rand(rng, 3, 4)
    tx, tw1, tw2, tb1, tb2 = (to_torch(a, True) for a in (x, w1, w2, b1, b2))
    ref = torch.nn.functional.silu(tx @ tw1 + tb1) * (tx @ tw2 + tb2)
    ex = leaf(x, ad)
    out = layer(ex)
    assert_close(out, ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    grads = weighted_backward(out, ref)
    assert_grad(ex, grads, tx)
    assert_grad(layer.linear_inner.weight.val(), grads, tw1)
    assert_grad(layer.linear_outer.weight.val(), grads, tw2)
    assert_grad(layer.linear_inner.bias.val(), grads, tb1)
    assert_grad(layer.linear_outer.bias.val(), grads, tb2)
    config = SwiGluConfig(4, 8)
    assert config.init().num_params() == 2 * 4 * 8  # no bias by default (Burn)
    assert SwiGluConfig(4, 8, bias=True).init().num_params() == 2 * (4 * 8 + 8)
