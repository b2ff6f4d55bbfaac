"""The parameter-free layers ``Unfold4d`` (``torch.nn.Unfold``) and ``Upsample``
(``torch.nn.Upsample``) against torch, forward and input gradient, on every device."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Tensor
from ember.errors import ConfigError
from ember.nn import Unfold4dConfig, UpsampleConfig


@pytest.mark.parametrize(
    "options",
    [dict(kernel_size=(2, 2)), dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=(2, 3), dilation=(2, 1))],
    ids=["2x2", "3x3-stride2-pad1", "2x3-dilated"],
)
def test_unfold4d_matches_torch(options, device, torch, rng):
    x_np = rng.standard_normal((2, 3, 6, 7)).astype(np.float32)
    layer = Unfold4dConfig(**options).init(device)
    x = Tensor.from_data(x_np, device=device)
    if device.is_autodiff():
        x = x.require_grad()
    out = layer(x)
    tx = torch.tensor(x_np, requires_grad=True)
    expected = torch.nn.Unfold(**options)(tx)
    np.testing.assert_allclose(out.to_data().to_numpy(), expected.detach().numpy(), rtol=1e-6, atol=1e-6)
    if device.is_autodiff():
        weights = rng.standard_normal(tuple(expected.shape)).astype(np.float32)
        grads = out.mul(Tensor.from_data(weights, device=device)).sum().backward()
        (expected * torch.tensor(weights)).sum().backward()
        np.testing.assert_allclose(x.grad(grads).to_data().to_numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "options",
    [
        dict(scale_factor=2.0),
        dict(size=(5, 9), mode="bilinear", align_corners=False),
        dict(scale_factor=1.5, mode="bilinear", align_corners=True),
        dict(size=(3, 4), mode="nearest-exact"),
    ],
    ids=["nearest-x2", "bilinear-size", "bilinear-aligned", "nearest-exact"],
)
def test_upsample_matches_torch(options, device, torch, rng):
    x_np = rng.standard_normal((2, 3, 4, 6)).astype(np.float32)
    layer = UpsampleConfig(**options).init(device)
    x = Tensor.from_data(x_np, device=device)
    if device.is_autodiff():
        x = x.require_grad()
    out = layer(x)
    tx = torch.tensor(x_np, requires_grad=True)
    expected = torch.nn.Upsample(**options)(tx)
    np.testing.assert_allclose(out.to_data().to_numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-5)
    if device.is_autodiff():
        weights = rng.standard_normal(tuple(expected.shape)).astype(np.float32)
        grads = out.mul(Tensor.from_data(weights, device=device)).sum().backward()
        (expected * torch.tensor(weights)).sum().backward()
        np.testing.assert_allclose(x.grad(grads).to_data().to_numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_upsample_config_errors():
    with pytest.raises(ConfigError, match="exactly one of size and scale_factor"):
        UpsampleConfig()
    with pytest.raises(ConfigError, match="exactly one of size and scale_factor"):
        UpsampleConfig(size=4, scale_factor=2.0)
    with pytest.raises(ConfigError, match="mode must be one of"):
        UpsampleConfig(scale_factor=2.0, mode="cubic")
