"""Layers of ember.nn on the GPU: each runs forward and backward on cube+autodiff
with the parameters of a flex twin, and matches it."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor, nn
from ember.nn.loss import CrossEntropyLossConfig
from tests.conftest import assert_close


def _input(shape, seed=0, ints=None):
    rng = np.random.default_rng(seed)
    if ints is not None:
        return rng.integers(0, ints, size=shape)
    return rng.standard_normal(shape).astype(np.float32)


def _mha(m, x):
    return m(nn.MhaInput.self_attn(x)).context


def _encoder(m, x):
    return m(nn.TransformerEncoderInput(x))


LAYERS = {
    "linear": (lambda: nn.LinearConfig(6, 3).init(), lambda: _input((4, 6)), None),
    "conv2d": (lambda: nn.Conv2dConfig((3, 4), 3, padding="same").init(), lambda: _input((2, 3, 7, 6)), None),
    "conv1d_stride": (lambda: nn.Conv1dConfig(2, 3, 3, stride=2).init(), lambda: _input((2, 2, 9)), None),
    "conv_transpose2d": (
        lambda: nn.ConvTranspose2dConfig((3, 2), (3, 3), stride=(2, 2)).init(),
        lambda: _input((1, 3, 4, 5)),
        None,
    ),
    "max_pool2d": (lambda: nn.MaxPool2dConfig((2, 2)).init(), lambda: _input((2, 3, 6, 6)), None),
    "avg_pool2d": (lambda: nn.AvgPool2dConfig((3, 3), strides=(2, 2)).init(), lambda: _input((2, 3, 7, 7)), None),
    "adaptive_avg_pool2d": (lambda: nn.AdaptiveAvgPool2dConfig((3, 2)).init(), lambda: _input((2, 3, 7, 5)), None),
    "batch_norm": (lambda: nn.BatchNormConfig(3).init(), lambda: _input((4, 3, 5)), None),
    "layer_norm": (lambda: nn.LayerNormConfig(6).init(), lambda: _input((4, 6)), None),
    "group_norm": (lambda: nn.GroupNormConfig(2, 4).init(), lambda: _input((3, 4, 5)), None),
    "rms_norm": (lambda: nn.RmsNormConfig(6).init(), lambda: _input((4, 6)), None),
    "embedding": (lambda: nn.EmbeddingConfig(100, 5).init(), lambda: _input((3, 80), ints=100), None),
    "lstm": (lambda: nn.LstmConfig(4, 6).init(), lambda: _input((2, 5, 4)), lambda m, x: m(x)[0]),
    "gru": (lambda: nn.GruConfig(4, 6).init(), lambda: _input((2, 5, 4)), lambda m, x: m(x)[0]),
    "rnn": (
        lambda: nn.RnnConfig(4, 6, num_layers=2, bidirectional=True).init(),
        lambda: _input((2, 5, 4)),
        lambda m, x: m(x, lengths=[5, 3])[0],
    ),
    "mha": (lambda: nn.MultiHeadAttentionConfig(8, 2, dropout=0.0).init(), lambda: _input((2, 5, 8)), _mha),
    "transformer": (
        lambda: nn.TransformerEncoderConfig(8, 16, 2, 1, dropout=0.0).init(),
        lambda: _input((2, 5, 8)),
        _encoder,
    ),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_matches_flex(gpu, name):
    make, data, call = LAYERS[name]
    call = call or (lambda m, x: m(x))
    flex = Device.flex().autodiff()
    flex.seed(0)
    model = _materialised(make(), flex)
    on_gpu = model.to_device(gpu.autodiff())
    x = data()
    results = []
    for device, m in ((flex, model), (gpu.autodiff(), on_gpu)):
        t = Tensor.from_data(x, device=device)
        if t.is_float():
            t = t.require_grad()
        out = call(m, t)
        loss = out.mul(out).sum()
        grads = loss.backward()
        tracked = [p.val() for p in m.params()] + ([t] if t.is_float() else [])
        results.append((out.to_numpy(), [v.grad(grads) for v in tracked]))
    (ref, ref_grads), (got, got_grads) = results
    assert_close(got, ref, rtol=1e-4, atol=1e-4)
    assert len(got_grads) == len(ref_grads)
    for g, r in zip(got_grads, ref_grads):
        assert (g is None) == (r is None)
        if g is not None:
            assert_close(g, r.to_numpy(), rtol=1e-3, atol=1e-3)


def _materialised(module, device):
    """``module`` on ``device`` with every lazily initialised parameter drawn there."""
    module = module.to_device(device)
    for p in module.params():
        p.val()
    return module


def test_cross_entropy_and_optimizers(gpu):
    from ember.optim import AdamWConfig, GradientsParams, SgdConfig

    rng = np.random.default_rng(1)
    logits = rng.standard_normal((6, 5)).astype(np.float32)
    targets = rng.integers(0, 5, size=6)
    losses = []
    for device in (Device.flex().autodiff(), gpu.autodiff()):
        lg = Tensor.from_data(logits, device=device).require_grad()
        loss = CrossEntropyLossConfig(smoothing=0.1).init().forward(lg, Tensor.from_data(targets, device=device))
        losses.append((loss.to_numpy(), lg.grad(loss.backward()).to_numpy()))
    assert_close(losses[1][0], losses[0][0], rtol=1e-5)
    assert_close(losses[1][1], losses[0][1], rtol=1e-4, atol=1e-6)
    for config in (SgdConfig(), AdamWConfig()):
        finals = []
        for device in (Device.flex().autodiff(), gpu.autodiff()):
            Device.flex().autodiff().seed(3)
            model = _materialised(nn.LinearConfig(5, 2).init(), Device.flex().autodiff()).to_device(device)
            optim = config.init()
            x = Tensor.from_data(logits, device=device)
            for _ in range(3):
                loss = model(x).mul(model(x)).mean()
                model = optim.step(0.1, model, GradientsParams.from_grads(loss.backward(), model))
            finals.append(model.weight.val().to_numpy())
        assert_close(finals[1], finals[0], rtol=1e-4, atol=1e-5)
