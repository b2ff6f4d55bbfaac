"""Whole models exported by ``torch.onnx.export``: an MLP, the small CNN (W3), a
ResNet-style block with batch norm, a transformer encoder layer, a causal attention
block, and models with a dynamic batch; each against onnxruntime and torch."""

from __future__ import annotations

import numpy as np
import pytest

import ember.onnx
from ember import Device, Tensor
from ember.errors import OnnxError, ShapeError
from ember.module import RunningState
from tests.onnx_import import models
from tests.onnx_import.helpers import export, run_ort

RTOL = 1e-5


def check(torch, ort, data: bytes, net, *inputs: np.ndarray, device=None, atol=1e-5):
    """The import's outputs equal onnxruntime's (to RTOL) and torch's."""
    device = device or Device.flex()
    model = ember.onnx.load(data, device)
    got = model(*[Tensor.from_data(x, device=device) for x in inputs]).to_numpy()
    (ort_out,) = run_ort(ort, data, *inputs)
    np.testing.assert_allclose(got, ort_out, rtol=RTOL, atol=atol)
    with torch.no_grad():
        want = net(*[torch.from_numpy(x) for x in inputs]).numpy()
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=atol)
    return model


def test_mlp(torch, ort, rng):
    net = models.mlp(torch)
    data = export(torch, net, (torch.zeros(5, 4),))
    model = check(torch, ort, data, net, rng.standard_normal((5, 4)).astype(np.float32))
    assert sorted(model.weights) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    assert model.num_params() == sum(p.numel() for p in net.parameters())


def test_small_cnn(torch, ort, rng):
    net = models.small_cnn(torch)
    data = export(torch, net, (torch.zeros(2, 1, 28, 28),))
    check(torch, ort, data, net, rng.standard_normal((2, 1, 28, 28)).astype(np.float32))


def test_resnet_block_with_batch_norm_infers_and_trains(torch, ort, rng):
    net = models.resnet(torch)
    # Without constant folding the exporter keeps BatchNormalization nodes (else it folds them into the convs).
    data = export(torch, net, (torch.zeros(2, 3, 8, 8),), do_constant_folding=False)
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    model = check(torch, ort, data, net, x)
    assert len(model.states) == 8  # running mean and variance of 4 BatchNormalization nodes
    assert all(isinstance(s, RunningState) for s in model.states.values())

    # Training (an autodiff device): batch statistics, running averages moved as ONNX moves
    # them (torch's mean; the population variance where torch takes the unbiased one).
    device = Device.flex().autodiff()
    trained = model.to_device(device)
    before = {n: s.value().to_numpy() for n, s in model.states.items()}
    counts = {}
    for name, module in net.named_modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.register_forward_hook(
                lambda m, i, o, name=name: counts.__setitem__(name, i[0].numel() // i[0].shape[1])
            )
    got = trained(Tensor.from_data(x, device=device)).to_numpy()
    net.train()
    want = net(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    stats = {n: b.numpy() for n, b in net.named_buffers() if "running" in n}
    for name, state in trained.states.items():
        expected = stats[name]
        if name.endswith("running_var"):
            n = counts[name.rsplit(".", 1)[0]]
            expected = 0.9 * before[name] + (expected - 0.9 * before[name]) * (n - 1) / n
        np.testing.assert_allclose(state.value().to_numpy(), expected, rtol=1e-5, atol=1e-6, err_msg=name)
    # Inference after training reads the moved averages, as torch's eval mode does.
    with torch.no_grad():
        for name, buffer in net.named_buffers():
            if name in trained.states:
                buffer.copy_(torch.from_numpy(trained.states[name].value().to_numpy()))
    net.eval()
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(trained.valid()(Tensor.from_data(x)).to_numpy(), want, rtol=1e-4, atol=1e-5)


def test_transformer_encoder_layer(torch, ort, rng):
    net = models.encoder(torch)
    data = export(torch, net, (torch.zeros(2, 5, 16),))
    model = check(torch, ort, data, net, rng.standard_normal((2, 5, 16)).astype(np.float32))
    # With static shapes every shape computation of the export is folded at load.
    assert not any(step.host for step in model.program.steps)


def test_causal_attention_block(torch, ort, rng):
    net = models.masked_attention(torch)
    data = export(torch, net, (torch.zeros(2, 6, dtype=torch.long),), opset=14)
    tokens = rng.integers(0, 20, (2, 6)).astype(np.int64)
    check(torch, ort, data, net, tokens)


@pytest.mark.parametrize("name", ["encoder", "small_cnn"])
def test_dynamic_batch(torch, ort, rng, name):
    net = getattr(models, name)(torch)
    shape = (2, 5, 16) if name == "encoder" else (2, 1, 28, 28)
    data = export(torch, net, (torch.zeros(*shape),), dynamic={"x": {0: "batch"}, "y": {0: "batch"}})
    model = ember.onnx.load(data, Device.flex())
    assert model.program.inputs[0].dims[0] is None
    for batch in (1, 3, 4, 3):
        x = rng.standard_normal((batch, *shape[1:])).astype(np.float32)
        got = model(Tensor.from_data(x)).to_numpy()
        np.testing.assert_allclose(got, run_ort(ort, data, x)[0], rtol=RTOL, atol=1e-5)
        with torch.no_grad():
            np.testing.assert_allclose(got, net(torch.from_numpy(x)).numpy(), rtol=RTOL, atol=1e-5)
    if name == "encoder":
        # The shape arithmetic runs on the host, once per input shape.
        assert any(step.host for step in model.program.steps)
        assert model.program.cacheable and len(model.program._host_cache) == 3


def test_a_dim_the_export_fixed_cannot_change(torch):
    net = models.small_cnn(torch)
    model = ember.onnx.load(export(torch, net, (torch.zeros(2, 1, 28, 28),)), Device.flex())
    with pytest.raises(ShapeError, match=r"input 'x' must have shape \[2, 1, 28, 28\], got \[3, 1, 28, 28\].*dynamic"):
        model(Tensor.zeros([3, 1, 28, 28]))


def test_exporter_deduplicated_initializers_are_untied(torch, rng):
    """Fresh LayerNorm weights are equal, and the exporter stores one of them with
    Identity aliases; the import gives each layer its own parameters again."""
    net = models.encoder(torch, randomize=False)
    data = export(torch, net, (torch.zeros(2, 5, 16),))
    model = ember.onnx.load(data, Device.flex())
    assert {"layer.norm1.weight", "layer.norm2.weight", "layer.norm2.bias"} <= set(model.weights)
    assert model.num_params() == sum(p.numel() for p in net.parameters())
    tied = ember.onnx.load(data, Device.flex(), untie=False)
    assert tied.num_params() < model.num_params()
    x = rng.standard_normal((2, 5, 16)).astype(np.float32)
    np.testing.assert_allclose(model(Tensor.from_data(x)).to_numpy(), tied(Tensor.from_data(x)).to_numpy())


@pytest.mark.gpu
def test_the_cube_backend_runs_imports(torch, rng):
    """The same imports on wgpu (with autodiff) give flex's outputs and gradients."""
    from tests.conftest import _gpu_device

    gpu = _gpu_device()
    for net, shape, options in [
        (models.encoder(torch), (2, 5, 16), {}),
        (models.resnet(torch), (2, 3, 8, 8), {"do_constant_folding": False}),
    ]:
        data = export(torch, net, (torch.zeros(*shape),), **options)
        x = rng.standard_normal(shape).astype(np.float32)
        results = []
        for device in (Device.flex().autodiff(), gpu.autodiff()):
            model = ember.onnx.load(data, device)
            out = model(Tensor.from_data(x, device=device))
            grads = out.square().mean().backward()
            results.append((out.to_numpy(), {n: p.val().grad(grads).to_numpy() for n, p in model.weights.items()}))
        (out_flex, grads_flex), (out_gpu, grads_gpu) = results
        np.testing.assert_allclose(out_gpu, out_flex, rtol=1e-4, atol=1e-5)
        for name in grads_flex:
            np.testing.assert_allclose(grads_gpu[name], grads_flex[name], rtol=1e-3, atol=1e-5, err_msg=name)


def test_input_shapes_make_a_fixed_batch_dynamic(torch, ort, rng):
    net = models.small_cnn(torch)
    data = export(torch, net, (torch.zeros(2, 1, 28, 28),))  # the batch fixed at 2
    model = ember.onnx.load(data, Device.flex(), input_shapes={"x": ["batch", 1, 28, 28]})
    for batch in (1, 5):
        x = rng.standard_normal((batch, 1, 28, 28)).astype(np.float32)
        with torch.no_grad():
            np.testing.assert_allclose(
                model(Tensor.from_data(x)).to_numpy(), net(torch.from_numpy(x)).numpy(), rtol=RTOL, atol=1e-5
            )
    with pytest.raises(OnnxError, match="has no tensor input 'images'; its inputs are x"):
        ember.onnx.load(data, input_shapes={"images": [None, 1, 28, 28]})
