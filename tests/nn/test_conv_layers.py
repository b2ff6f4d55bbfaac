"""Convolution and pooling layers against torch.nn with the same weights (ember's
layouts equal PyTorch's for convolutions), gradients of every parameter and of the
input, configs and their errors."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import ConfigError
from ember.nn import (
    AdaptiveAvgPool1dConfig,
    AdaptiveAvgPool2dConfig,
    AvgPool1dConfig,
    AvgPool2dConfig,
    Conv1d,
    Conv1dConfig,
    Conv2d,
    Conv2dConfig,
    ConvTranspose1d,
    ConvTranspose1dConfig,
    ConvTranspose2d,
    ConvTranspose2dConfig,
    MaxPool1dConfig,
    MaxPool2dConfig,
)
from tests.conftest import assert_close, import_torch
from tests.nn.parity import assert_grad, autodiff_of, check_layer, leaf, param, rand, to_torch, weighted_backward


def _copy_params(torch_layer, ember_layer, device):
    """The ember layer with torch's weight and bias (same layouts)."""
    weight = param(torch_layer.weight.detach().numpy(), device)
    bias = None if torch_layer.bias is None else param(torch_layer.bias.detach().numpy(), device)
    return ember_layer.__class__(**{**ember_layer.__dict__, "weight": weight, "bias": bias})


def _check_layer(torch, ember_layer, torch_layer, x, device):
    ad = autodiff_of(device)
    ours = _copy_params(torch_layer, ember_layer, ad)
    tx = to_torch(x, True)
    ref = torch_layer(tx)
    assert_close(
        _copy_params(torch_layer, ember_layer, device)(Tensor.from_data(x, device=device)),
        ref.detach().numpy(),
        rtol=1e-4,
        atol=1e-4,
    )
    ex = leaf(x, ad)
    grads = weighted_backward(ours(ex), ref)
    assert_grad(ex, grads, tx, rtol=1e-4, atol=1e-4)
    assert_grad(ours.weight.val(), grads, torch_layer.weight, rtol=1e-4, atol=1e-4)
    if torch_layer.bias is not None:
        assert_grad(ours.bias.val(), grads, torch_layer.bias, rtol=1e-4, atol=1e-4)


@pytest.mark.torch
def test_conv2d_layer(device, rng):
    torch = import_torch()
    torch.manual_seed(0)
    config = Conv2dConfig((4, 6), (3, 2), stride=(2, 1), dilation=(1, 2), groups=2, padding=(1, 2))
    layer = config.init(device)
    t_layer = torch.nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)
    _check_layer(torch, layer, t_layer, rand(rng, 2, 4, 7, 9), device)
    same = Conv2dConfig((4, 3), 3, padding="same", bias=False).init(device)
    _check_layer(torch, same, torch.nn.Conv2d(4, 3, 3, padding="same", bias=False), rand(rng, 1, 4, 5, 6), device)


@pytest.mark.torch
def test_conv1d_layer(device, rng):
    torch = import_torch()
    torch.manual_seed(1)
    layer = Conv1dConfig(3, 6, 4, stride=2, dilation=2, groups=3, padding=3).init(device)
    _check_layer(
        torch, layer, torch.nn.Conv1d(3, 6, 4, stride=2, padding=3, dilation=2, groups=3), rand(rng, 2, 3, 13), device
    )


@pytest.mark.torch
def test_conv_transpose_layers(device, rng):
    torch = import_torch()
    torch.manual_seed(2)
    layer = ConvTranspose2dConfig((4, 6), (3, 2), stride=(2, 3), padding=(1, 0), padding_out=(1, 2), groups=2).init(
        device
    )
    t_layer = torch.nn.ConvTranspose2d(4, 6, (3, 2), stride=(2, 3), padding=(1, 0), output_padding=(1, 2), groups=2)
    _check_layer(torch, layer, t_layer, rand(rng, 2, 4, 5, 4), device)
    layer = ConvTranspose1dConfig((2, 4), 3, stride=2, dilation=2, padding=1, padding_out=1).init(device)
    t_layer = torch.nn.ConvTranspose1d(2, 4, 3, stride=2, padding=1, output_padding=1, dilation=2)
    _check_layer(torch, layer, t_layer, rand(rng, 3, 2, 6), device)


def test_default_init_matches_pytorch_bounds():
    device = Device.flex()
    device.seed(0)
    layer = Conv2dConfig((8, 16), 3).init(device)
    bound = 1 / np.sqrt(8 * 9)
    w = layer.weight.val().to_numpy()
    assert w.shape == (16, 8, 3, 3) and np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert np.abs(layer.bias.val().to_numpy()).max() <= bound
    t = ConvTranspose2dConfig((8, 4), 2, groups=2).init(device)
    assert list(t.weight.lazy_shape()) == [8, 2, 2, 2]
    assert np.abs(t.weight.val().to_numpy()).max() <= 1 / np.sqrt(2 * 4)


def test_layers_built_from_tensors_and_repr():
    w = Tensor.ones([2, 1, 3, 3])
    layer = Conv2d(weight=param(w.to_numpy(), Device.flex()), padding=1)
    assert layer(Tensor.ones([1, 1, 4, 4])).to_numpy()[0, 0, 1, 1] == 9.0
    assert "ch_in: 1, ch_out: 2, kernel_size: (3, 3)" in repr(layer)
    assert Conv1d(weight=param(np.ones((2, 2, 3), np.float32), Device.flex())).kernel_size == 3
    assert ConvTranspose1d(weight=param(np.ones((2, 2, 3), np.float32), Device.flex()))(
        Tensor.ones([1, 2, 4])
    ).dims() == [1, 2, 6]
    assert ConvTranspose2d(weight=param(np.ones((2, 2, 3, 3), np.float32), Device.flex()), stride=(2, 2))(
        Tensor.ones([1, 2, 4, 4])
    ).dims() == [1, 2, 9, 9]


def test_conv_config_errors_at_init():
    with pytest.raises(ConfigError, match="divisible by the number of groups"):
        Conv2dConfig((4, 6), 3, groups=4)
    with pytest.raises(ConfigError, match="kernel_size must be >= 1"):
        Conv2dConfig((4, 6), (0, 3))
    with pytest.raises(ConfigError, match="padding must be 'valid', 'same'"):
        Conv2dConfig((4, 6), 3, padding="full")
    with pytest.raises(ConfigError, match="padding must be >= 0"):
        Conv1dConfig(2, 2, 3, padding=-1)
    with pytest.raises(ConfigError, match=r"stride must be int \| tuple\[int, int\]"):
        Conv2dConfig((1, 1), 3, stride=(1, 1, 1))
    with pytest.raises(ConfigError, match="padding_out .* must be smaller than the stride"):
        ConvTranspose2dConfig((2, 2), 3, stride=2, padding_out=2)
    with pytest.raises(ConfigError, match="channels must be > 0"):
        ConvTranspose1dConfig((0, 2), 3)


def test_conv_config_round_trips_through_json():
    config = Conv2dConfig((2, 4), (3, 3), padding=((1, 0), (2, 1)), stride=2)
    assert Conv2dConfig.from_json(config.to_json()) == config
    assert MaxPool2dConfig.from_json(MaxPool2dConfig(2, padding="same").to_json()) == MaxPool2dConfig(2, padding="same")


def test_kernel_larger_than_padded_input_is_a_clear_error_at_the_call():
    from ember.errors import ShapeError

    layer = Conv2dConfig((1, 1), 5).init()
    with pytest.raises(
        ShapeError, match=r"conv2d: the kernel \[5, 5\] .* is larger than the padded input .* \[1, 1, 3, 3\]"
    ):
        layer(Tensor.zeros([1, 1, 3, 3]))


@pytest.mark.torch
def test_pool_layers_match_torch(device, rng):
    torch = import_torch()
    x2, x1 = rand(rng, 2, 3, 9, 8), rand(rng, 2, 3, 11)
    nn = torch.nn
    cases = [
        (
            MaxPool2dConfig(3, strides=(2, 1), padding=1, dilation=(1, 2), ceil_mode=True),
            nn.MaxPool2d(3, (2, 1), 1, (1, 2), ceil_mode=True),
            x2,
        ),
        (MaxPool2dConfig(2), nn.MaxPool2d(2), x2),
        (
            AvgPool2dConfig((3, 2), strides=2, padding=(1, 1), count_include_pad=False, ceil_mode=True),
            nn.AvgPool2d((3, 2), 2, (1, 1), ceil_mode=True, count_include_pad=False),
            x2,
        ),
        (MaxPool1dConfig(3, stride=2, padding=1), nn.MaxPool1d(3, 2, 1), x1),
        (AvgPool1dConfig(4, stride=3, padding=2), nn.AvgPool1d(4, 3, 2), x1),
        (AdaptiveAvgPool2dConfig((4, 3)), nn.AdaptiveAvgPool2d((4, 3)), x2),
        (AdaptiveAvgPool1dConfig(5), nn.AdaptiveAvgPool1d(5), x1),
    ]
    for config, t_layer, x in cases:
        check_layer(config.init(), t_layer, x, device, rtol=1e-5, atol=1e-6, grad_rtol=1e-5, grad_atol=1e-6, plain=True)


def test_pool_with_indices_and_same_padding(rng):
    x = Tensor.from_data(rand(rng, 1, 2, 5, 5))
    pool = MaxPool2dConfig(2, strides=1, padding="same").init()
    assert pool(x).dims() == [1, 2, 5, 5]
    values, indices = pool.forward_with_indices(x)
    flat = x.to_numpy().reshape(1, 2, 25)
    np.testing.assert_array_equal(
        np.take_along_axis(flat, indices.to_numpy().reshape(1, 2, 25), 2).reshape(1, 2, 5, 5), values.to_numpy()
    )
    assert MaxPool1dConfig(2).init().forward_with_indices(Tensor.ones([1, 1, 4]))[1].tolist() == [[[0, 2]]]
    assert AvgPool2dConfig(2, strides=1, padding="same").init()(x).dims() == [1, 2, 5, 5]
    with pytest.raises(ConfigError, match="strides must be >= 1"):
        MaxPool2dConfig(2, strides=0)
