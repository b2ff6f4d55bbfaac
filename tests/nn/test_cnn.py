"""The small CNN of benchmarks/nn.py end to end: forward and every gradient against
the same network in torch, and a few training steps that lower the loss."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.nn import SmallCnn, _torch_cnn
from ember import Device, Tensor
from ember.nn.loss import CrossEntropyLossConfig
from ember.optim import AdamConfig, GradientsParams
from tests.conftest import assert_close, import_torch


@pytest.mark.torch
def test_small_cnn_matches_torch():
    torch = import_torch()
    device = Device.flex().autodiff()
    device.seed(0)
    rng = np.random.default_rng(0)
    model = SmallCnn.new(device)
    net = _torch_cnn(torch, model)
    images = rng.standard_normal((8, 1, 28, 28)).astype(np.float32)
    labels = rng.integers(0, 10, 8)
    loss = CrossEntropyLossConfig().init()(
        model(Tensor.from_data(images, device=device)), Tensor.from_data(labels, device=device)
    )
    ref = torch.nn.functional.cross_entropy(net(torch.from_numpy(images)), torch.from_numpy(labels))
    assert_close(loss, ref.detach().numpy().reshape(1), rtol=1e-5, atol=1e-6)
    grads = loss.backward()
    ref.backward()
    pairs = [
        (model.conv1.weight, net[0].weight, False),
        (model.conv1.bias, net[0].bias, False),
        (model.conv2.weight, net[3].weight, False),
        (model.conv2.bias, net[3].bias, False),
        (model.fc.weight, net[7].weight, True),
        (model.fc.bias, net[7].bias, False),
    ]
    for ours, theirs, transposed in pairs:
        expected = theirs.grad.numpy()
        assert_close(ours.val().grad(grads), expected.T if transposed else expected, rtol=1e-4, atol=1e-6)


def test_small_cnn_learns():
    device = Device.flex().autodiff()
    device.seed(1)
    rng = np.random.default_rng(1)
    # Two classes: a bright square in the top-left or bottom-right quadrant.
    images = rng.normal(0.0, 0.1, (32, 1, 28, 28)).astype(np.float32)
    labels = rng.integers(0, 2, 32)
    for i, label in enumerate(labels):
        r = 2 if label == 0 else 16
        images[i, 0, r : r + 10, r : r + 10] += 1.0
    x, y = Tensor.from_data(images, device=device), Tensor.from_data(labels, device=device)
    model, optim = SmallCnn.new(device), AdamConfig().init()
    ce = CrossEntropyLossConfig().init()
    losses = []
    for _ in range(8):
        loss = ce(model(x), y)
        losses.append(loss.into_scalar())
        model = optim.step(3e-3, model, GradientsParams.from_grads(loss.backward(), model))
    assert losses[-1] < 0.5 * losses[0]
    predictions = model.valid()(x.to_device(device.inner())).argmax(1).to_numpy().reshape(-1)
    assert (predictions == labels).mean() == 1.0
