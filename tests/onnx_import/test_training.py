"""An imported model trains: gradients against torch's autograd, fine-tuning steps
against the same steps in torch, a compiled step (``ember.compile``) against eager
ones, the fusion device, records (``save_file``/``load_file``) and the Learner."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ember
import ember.onnx
from ember import Device, Tensor
from ember.capture import CompileWarning
from ember.data import ArrayDataset, DataLoaderBuilder, DefaultBatcher
from ember.nn.loss import CrossEntropyLoss
from ember.optim import AdamConfig, GradientsParams, SgdConfig
from ember.train import ClassificationOutput, Learner, LossMetric, SupervisedTraining
from tests.onnx_import import models
from tests.onnx_import.helpers import export


def digits_like(rng, n: int, image: int = 28):
    x = rng.standard_normal((n, 1, image, image)).astype(np.float32)
    y = rng.integers(0, 10, n).astype(np.int64)
    return x, y


def cnn(torch, image: int = 28, dynamic: bool = False):
    net = models.small_cnn(torch, image)
    data = export(
        torch,
        net,
        (torch.zeros(8, 1, image, image),),
        dynamic={"x": {0: "batch"}, "y": {0: "batch"}} if dynamic else None,
    )
    return net, data


def torch_layout(model, name: str, array: np.ndarray) -> np.ndarray:
    """A parameter's array as torch lays it out (Linear weights are stored [d_in, d_out])."""
    return array.T if name in model.transposed_params else array


def test_gradients_match_torch(torch, rng):
    """Parameter and input gradients of a transformer encoder layer against torch."""
    net = models.encoder(torch)
    data = export(torch, net, (torch.zeros(2, 5, 16),))
    device = Device.flex().autodiff()
    model = ember.onnx.load(data, device)
    x = rng.standard_normal((2, 5, 16)).astype(np.float32)
    w = rng.standard_normal((2, 5, 16)).astype(np.float32)
    xe = Tensor.from_data(x, device=device).require_grad()
    grads = (model(xe) * Tensor.from_data(w, device=device)).sum().backward()

    xt = torch.from_numpy(x).requires_grad_()
    (net(xt) * torch.from_numpy(w)).sum().backward()
    np.testing.assert_allclose(xe.grad(grads).to_numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    by_name = dict(net.named_parameters())
    compared = 0
    for name, param in model.weights.items():
        if name in by_name:  # the exporter stores some weights transposed, under generated names
            np.testing.assert_allclose(
                torch_layout(model, name, param.val().grad(grads).to_numpy()),
                by_name[name].grad.numpy(),
                rtol=1e-4,
                atol=1e-5,
                err_msg=name,
            )
            compared += 1
    assert compared >= 8


def torch_steps(torch, net, x, y, lr, steps, momentum=0.0):
    """SGD with momentum in torch, written out (torch.optim would import torch's compiler: seconds)."""
    buffers = [torch.zeros_like(p) for p in net.parameters()]
    losses = []
    for _ in range(steps):
        net.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        with torch.no_grad():
            for p, buf in zip(net.parameters(), buffers):
                buf.mul_(momentum).add_(p.grad)
                p.sub_(lr * buf)
        losses.append(loss.item())
    return losses


def make_step(optim):
    def train_step(model, x, y, lr):
        loss = CrossEntropyLoss().forward(model(x), y)
        return optim.step(lr, model, GradientsParams.from_grads(loss.backward(), model)), loss

    return train_step


def test_fine_tuning_steps_match_torch(torch, rng):
    net, data = cnn(torch, image=8)
    x, y = digits_like(rng, 8, image=8)
    device = Device.flex().autodiff()
    model = ember.onnx.load(data, device)
    ids = {name: p.id for name, p in model.weights.items()}
    step = make_step(SgdConfig(momentum=0.9).init())
    xe, ye = Tensor.from_data(x, device=device), Tensor.from_data(y, device=device)
    losses = []
    for _ in range(3):
        model, loss = step(model, xe, ye, 0.05)
        losses.append(loss.into_scalar())
    expected = torch_steps(torch, net, x, y, 0.05, 3, momentum=0.9)
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    assert {name: p.id for name, p in model.weights.items()} == ids  # the same ParamIds after each step
    assert model.transposed_params == {"7.weight"}  # the head's Linear, stored [d_in, d_out]
    for name, param in net.named_parameters():
        np.testing.assert_allclose(
            torch_layout(model, name, model.weights[name].val().to_numpy()),
            param.detach().numpy(),
            rtol=1e-4,
            atol=1e-6,
            err_msg=name,
        )


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic-batch"])
def test_compiled_fine_tuning_step_matches_eager(torch, rng, dynamic):
    _, data = cnn(torch, image=8, dynamic=dynamic)
    x, y = digits_like(rng, 8, image=8)
    device = Device.flex().autodiff()
    xe, ye = Tensor.from_data(x, device=device), Tensor.from_data(y, device=device)

    def run(compiled: bool):
        model = ember.onnx.load(data, device)
        for name, p in model.weights.items():  # the same start for both runs
            model.weights[name] = ember.Param(p.id, Tensor.from_data(start[name], device=device))
        step_fn = make_step(AdamConfig(epsilon=1e-8).init())
        step = ember.compile(step_fn) if compiled else step_fn
        losses = []
        for _ in range(4):
            model, loss = step(model, xe, ye, 1e-2)
            losses.append(loss.into_scalar())
        return losses, model, step

    start = {n: p.val().to_numpy() for n, p in ember.onnx.load(data, Device.flex()).weights.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)  # no fallback to eager
        compiled, model_c, step = run(True)
    eager, model_e, _ = run(False)
    np.testing.assert_allclose(compiled, eager, rtol=1e-5)
    # One trace for the first step (no optimizer state yet), one for the rest.
    assert step.stats["traces"] == 2 and step.stats["replays"] == 2 and step.stats["eager"] == 0
    for name in model_e.weights:
        np.testing.assert_allclose(
            model_c.weights[name].val().to_numpy(), model_e.weights[name].val().to_numpy(), rtol=1e-4, atol=1e-6
        )


def test_fusion_device_matches_flex(torch, rng):
    net = models.masked_attention(torch)
    data = export(torch, net, (torch.zeros(2, 6, dtype=torch.long),), opset=14)
    tokens = rng.integers(0, 20, (2, 6)).astype(np.int64)
    results = []
    for device in (Device.flex().autodiff(), Device.flex().fusion().autodiff()):
        model = ember.onnx.load(data, device)
        out = model(Tensor.from_data(tokens, device=device))
        grads = out.square().mean().backward()
        results.append((out.to_numpy(), {n: p.val().grad(grads).to_numpy() for n, p in model.weights.items()}))
    (out_a, grads_a), (out_b, grads_b) = results
    np.testing.assert_allclose(out_b, out_a, rtol=1e-5, atol=1e-6)
    for name in grads_a:
        np.testing.assert_allclose(grads_b[name], grads_a[name], rtol=1e-4, atol=1e-6, err_msg=name)


def test_save_file_and_load_file_keep_values_and_ids(torch, rng, tmp_path):
    net = models.resnet(torch)
    data = export(torch, net, (torch.zeros(2, 3, 8, 8),), do_constant_folding=False)
    device = Device.flex().autodiff()
    model = ember.onnx.load(data, device)
    x = Tensor.from_data(rng.standard_normal((2, 3, 8, 8)).astype(np.float32), device=device)
    loss = model(x).square().mean()  # training: the batch-norm statistics move too
    model = SgdConfig().init().step(0.1, model, GradientsParams.from_grads(loss.backward(), model))
    model.save_file(tmp_path / "tuned.safetensors")

    fresh = ember.onnx.load(data, device).load_file(tmp_path / "tuned.safetensors")
    assert [(n, p.id) for n, p in fresh.named_params()] == [(n, p.id) for n, p in model.named_params()]
    for (name, a), (_, b) in zip(model.to_record().items(), fresh.to_record().items()):
        np.testing.assert_array_equal(a.to_numpy(), b.to_numpy(), err_msg=name)
    assert any(name.startswith("states.") for name in fresh.to_record())
    assert all(name.startswith("weights.") for name, _ in fresh.named_params())
    assert [p.id for p in fresh.params()] == [p.id for _, p in fresh.named_params()]  # the Module API works
    assert fresh.num_params() == sum(int(np.prod(p.val().dims())) for p in fresh.params())
    valid_x = x.to_device(device.inner())
    np.testing.assert_array_equal(fresh.valid()(valid_x).to_numpy(), model.valid()(valid_x).to_numpy())


def test_the_learner_fine_tunes_an_imported_model(torch, rng, tmp_path):
    _, data = cnn(torch, image=8, dynamic=True)
    x, y = digits_like(rng, 32, image=8)
    y = (x.mean(axis=(1, 2, 3)) > 0).astype(np.int64)  # learnable
    device = Device.flex().autodiff()
    device.seed(0)
    model = ember.onnx.load(data, device)
    loss_fn = CrossEntropyLoss()

    def step(model, batch):
        images, targets = batch
        logits = model(images)
        return ClassificationOutput(loss_fn.forward(logits, targets), logits, targets)

    loader = DataLoaderBuilder(DefaultBatcher()).batch_size(16).set_device(Device.flex()).build(ArrayDataset(x, y))
    training = SupervisedTraining(tmp_path).renderer("none").metric_train_numeric(LossMetric()).num_epochs(3)
    result = training.launch(
        Learner(model, AdamConfig().init(), 1e-2, train_step=step, valid_step=step), loader, loader
    )
    losses = [v for _, v in result.history.series("Loss", "train")]
    assert losses[-1] < 0.7 * losses[0]
    assert isinstance(result.model, ember.onnx.OnnxModel)
