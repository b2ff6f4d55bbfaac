"""Normalisation layers against torch.nn: BatchNorm in training (batch statistics,
running averages) and evaluation, LayerNorm, GroupNorm, RmsNorm; gradients of
parameters and inputs."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import ConfigError, ShapeError
from ember.module import Param, RunningState
from ember.nn import BatchNorm, BatchNormConfig, GroupNormConfig, LayerNorm, LayerNormConfig, RmsNormConfig
from tests.conftest import assert_close, import_torch
from tests.nn.parity import assert_grad, autodiff_of, check_layer, leaf, param, rand, to_torch, weighted_backward

pytestmark = pytest.mark.torch


def _with_affine(torch_layer, device, cls, **fields):
    return cls(
        gamma=param(torch_layer.weight.detach().numpy(), device),
        beta=param(torch_layer.bias.detach().numpy(), device),
        **fields,
    )


@pytest.mark.parametrize("shape", [(5, 3), (4, 3, 7), (2, 3, 5, 4)])
def test_batch_norm_training_and_running_statistics(device, shape, rng):
    torch = import_torch()
    ad = autodiff_of(device)
    t_layer = torch.nn.BatchNorm1d(3, momentum=0.2) if len(shape) < 4 else torch.nn.BatchNorm2d(3, momentum=0.2)
    with torch.no_grad():
        t_layer.weight.uniform_(0.5, 1.5)
        t_layer.bias.uniform_(-0.5, 0.5)
    layer = BatchNormConfig(3, momentum=0.2).init(ad)
    layer = _with_affine(
        t_layer,
        ad,
        BatchNorm,
        running_mean=layer.running_mean,
        running_var=layer.running_var,
        momentum=0.2,
        epsilon=1e-5,
    )
    for step in range(2):
        x = rand(rng, *shape) * 2 + 1
        tx = to_torch(x, True)
        ref = t_layer.train()(tx)
        ex = leaf(x, ad)
        out = layer(ex)
        assert_close(out, ref.detach().numpy(), rtol=1e-4, atol=1e-4)
        grads = weighted_backward(out, ref, seed=step)
        assert_grad(ex, grads, tx, rtol=1e-3, atol=1e-4)
        assert_grad(layer.gamma.val(), grads, t_layer.weight, rtol=1e-4, atol=1e-4)
        assert_grad(layer.beta.val(), grads, t_layer.bias, rtol=1e-4, atol=1e-4)
        t_layer.weight.grad = t_layer.bias.grad = None
        assert_close(layer.running_mean.value(), t_layer.running_mean.numpy(), rtol=1e-5, atol=1e-6)
        assert_close(layer.running_var.value(), t_layer.running_var.numpy(), rtol=1e-5, atol=1e-6)
    # Evaluation: model.valid() moves to the inner device and uses the running statistics.
    evaluated = layer.valid()
    x = rand(rng, *shape)
    out = evaluated(Tensor.from_data(x, device=ad.inner()))
    assert not out.device.is_autodiff()
    assert_close(out, t_layer.eval()(to_torch(x)).detach().numpy(), rtol=1e-4, atol=1e-4)


def test_batch_norm_errors():
    with pytest.raises(ConfigError, match="momentum must lie in"):
        BatchNormConfig(3, momentum=1.5)
    layer = BatchNormConfig(3).init(Device.flex().autodiff())
    with pytest.raises(ShapeError, match=r"\[batch, 3, \.\.\.\]"):
        layer(Tensor.zeros([2, 4], device=Device.flex().autodiff()))
    with pytest.raises(ShapeError, match="more than one value per channel"):
        layer(Tensor.zeros([1, 3], device=Device.flex().autodiff()))
    assert isinstance(layer.running_mean, RunningState)
    assert [path for path, _ in layer.named_states()] == ["running_mean", "running_var"]


def test_layer_norm(device, rng):
    torch = import_torch()
    t_layer = torch.nn.LayerNorm(6, eps=1e-3)
    with torch.no_grad():
        t_layer.weight.uniform_(0.5, 1.5)
        t_layer.bias.uniform_(-0.5, 0.5)
    ad = autodiff_of(device)
    layer = _with_affine(t_layer, ad, LayerNorm, epsilon=1e-3)
    x = rand(rng, 2, 3, 6)
    tx = to_torch(x, True)
    ref = t_layer(tx)
    assert_close(
        _with_affine(t_layer, device, LayerNorm, epsilon=1e-3)(Tensor.from_data(x, device=device)),
        ref.detach().numpy(),
        rtol=1e-4,
        atol=1e-5,
    )
    ex = leaf(x, ad)
    grads = weighted_backward(layer(ex), ref)
    assert_grad(ex, grads, tx, rtol=1e-3, atol=1e-4)
    assert_grad(layer.gamma.val(), grads, t_layer.weight)
    assert_grad(layer.beta.val(), grads, t_layer.bias)
    no_bias = LayerNormConfig(6, bias=False).init(device)
    assert no_bias.beta is None and no_bias.num_params() == 6
    with pytest.raises(ShapeError, match="d_model=6"):
        no_bias(Tensor.zeros([2, 5], device=device))


def test_group_norm(device, rng):
    torch = import_torch()
    t_layer = torch.nn.GroupNorm(3, 6, eps=1e-4)
    with torch.no_grad():
        t_layer.weight.uniform_(0.5, 1.5)
        t_layer.bias.uniform_(-0.5, 0.5)
    ad = autodiff_of(device)
    layer = GroupNormConfig(3, 6, epsilon=1e-4).init(ad)
    layer = layer.__class__(
        gamma=param(t_layer.weight.detach().numpy(), ad),
        beta=param(t_layer.bias.detach().numpy(), ad),
        num_groups=3,
        num_channels=6,
        epsilon=1e-4,
    )
    x = rand(rng, 2, 6, 5, 3)
    grads = check_layer(layer, t_layer, x, device, atol=1e-4)
    assert_grad(layer.gamma.val(), grads, t_layer.weight)
    assert_grad(layer.beta.val(), grads, t_layer.bias)
    plain = GroupNormConfig(2, 6, affine=False).init(device)
    assert plain.num_params() == 0
    assert_close(
        plain(Tensor.from_data(x, device=device)),
        torch.nn.functional.group_norm(to_torch(x), 2).numpy(),
        rtol=1e-4,
        atol=1e-4,
    )
    with pytest.raises(ConfigError, match="divisible by num_groups=4"):
        GroupNormConfig(4, 6)


def test_rms_norm(device, rng):
    torch = import_torch()
    t_layer = torch.nn.RMSNorm(6, eps=1e-5)
    with torch.no_grad():
        t_layer.weight.uniform_(0.5, 1.5)
    ad = autodiff_of(device)
    layer = RmsNormConfig(6).init(ad)
    layer = layer.__class__(gamma=param(t_layer.weight.detach().numpy(), ad), epsilon=1e-5)
    grads = check_layer(layer, t_layer, rand(rng, 3, 4, 6), device)
    assert_grad(layer.gamma.val(), grads, t_layer.weight)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_rms_norm_of_half_inputs_is_computed_in_float32(rng, dtype):
    """As Hugging Face's LlamaRMSNorm: normalised in float32, rounded to the input's
    dtype, then scaled (a float32 scale promotes the result, as in PyTorch)."""
    torch = import_torch()
    x = (rng.standard_normal((3, 8)) * 30).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, 8).astype(np.float32)
    t_dtype = getattr(torch, dtype)
    normed = torch.nn.functional.rms_norm(torch.tensor(x).to(t_dtype), (8,), eps=1e-6)
    for scale in (gamma, torch.tensor(gamma).to(t_dtype).float().numpy()):
        layer = RmsNormConfig(8, epsilon=1e-6).init()
        layer = layer.__class__(gamma=param(scale, Device.flex()), epsilon=1e-6)
        out = layer(Tensor.from_data(x).cast(dtype))
        assert out.dtype.name.lower() == "float32"
        np.testing.assert_array_equal(out.to_numpy(), normed.float().mul(torch.tensor(scale)).numpy())
    half = layer.__class__(gamma=Param.from_tensor(Tensor.from_data(gamma).cast(dtype)), epsilon=1e-6)
    out = half(Tensor.from_data(x).cast(dtype))
    assert out.dtype.name.lower() == dtype
    expected = torch.tensor(gamma).to(t_dtype) * normed
    np.testing.assert_array_equal(out.float().to_numpy(), expected.float().numpy())
