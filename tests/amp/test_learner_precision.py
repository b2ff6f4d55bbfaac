"""The Learner's ``precision``: W2's MLP trained in bf16-mixed on scikit-learn's digits
reaches the float32 accuracy; 16-mixed scales the loss and checkpoints its scaler."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Module, Tensor
from ember.amp import GradScaler, Precision
from ember.data import ArrayDataset, DataLoaderBuilder, DefaultBatcher
from ember.errors import ConfigError
from ember.module.record import load_record
from ember.nn import Linear, LinearConfig, Relu
from ember.nn.loss import CrossEntropyLossConfig
from ember.optim import AdamConfig
from ember.train import AccuracyMetric, ClassificationOutput, Learner, SupervisedTraining


class DigitsMlp(Module):
    """W2's MLP with the digits' 64 inputs: 64-256-10 (W2 itself is 784-256-10 on MNIST)."""

    l1: Linear
    act: Relu
    l2: Linear

    def forward(self, x: Tensor) -> Tensor:
        return self.l2(self.act(self.l1(x)))

    def step(self, batch) -> ClassificationOutput:
        x, y = batch
        logits = self.forward(x)
        return ClassificationOutput(CrossEntropyLossConfig().init().forward(logits, y), logits, y)

    train_step = valid_step = step


def _digits(seed: int = 0):
    datasets = pytest.importorskip("sklearn.datasets")
    digits = datasets.load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    cut = 1437  # 80% to train, 360 images to validate
    flex = Device.flex()
    train = (
        DataLoaderBuilder(DefaultBatcher())
        .batch_size(32)
        .shuffle(seed)
        .set_device(flex)
        .build(ArrayDataset(x[:cut], y[:cut]))
    )
    valid = DataLoaderBuilder(DefaultBatcher()).batch_size(360).set_device(flex).build(ArrayDataset(x[cut:], y[cut:]))
    return train, valid


def _fit(precision: str, epochs: int = 8, artifact_dir=None, learner_kwargs=None):
    train, valid = _digits()
    device = Device.flex().autodiff()
    device.seed(0)
    model = DigitsMlp(LinearConfig(64, 256).init(device), Relu(), LinearConfig(256, 10).init(device))
    learner = Learner(model, AdamConfig().init(), 1e-3, precision=precision, **(learner_kwargs or {}))
    training = (
        SupervisedTraining(artifact_dir).renderer("none").metric_valid_numeric(AccuracyMetric()).num_epochs(epochs)
    )
    result = training.launch(learner, train, valid)
    return result, learner


def test_bf16_mixed_reaches_the_float32_accuracy_on_digits():
    full, _ = _fit("32-true")
    mixed, learner = _fit("bf16-mixed")
    acc_full = full.summary.get("Accuracy", "valid").final
    acc_mixed = mixed.summary.get("Accuracy", "valid").final
    assert acc_full > 94.0
    assert acc_mixed >= acc_full - 0.5, (acc_mixed, acc_full)
    assert not learner.grad_scaler.is_enabled()
    for _, p in mixed.model.named_params():
        assert p.dtype.value == "float32"  # float32 master weights


def test_16_mixed_trains_and_checkpoints_its_scaler(tmp_path):
    result, learner = _fit(
        "16-mixed",
        epochs=3,
        artifact_dir=tmp_path,
        learner_kwargs={"grad_scaler": GradScaler(init_scale=2.0**24, growth_interval=50)},
    )
    assert result.summary.get("Accuracy", "valid").final > 85.0
    scaler = learner.grad_scaler
    assert scaler.skipped_steps >= 1  # 2^24 overflows float16 at first, then backs off
    records = load_record(tmp_path / "checkpoint" / "epoch-0003" / "records.safetensors")
    assert records["grad_scaler"]["scale"] == scaler.get_scale()
    assert records["grad_scaler"]["growth_tracker"] == scaler.state_dict()["growth_tracker"]
    # Resuming restores the scale (the run is already complete: nothing more is trained).
    _, resumed = _fit("16-mixed", epochs=3, artifact_dir=tmp_path)
    assert resumed.grad_scaler.get_scale() == scaler.get_scale()


def test_precision_names():
    assert Precision.parse("bf16-mixed").autocast_dtype.value == "bfloat16"
    assert Precision.parse("16-mixed").loss_scaling and not Precision.parse("32").is_mixed
    with pytest.raises(ConfigError, match="bf16-mixed"):
        Precision.parse("fp8")
    device = Device.flex().autodiff()
    model = DigitsMlp(LinearConfig(64, 8).init(device), Relu(), LinearConfig(8, 10).init(device))
    assert "bf16-mixed" in repr(Learner(model, AdamConfig().init(), 1e-3, precision="bf16-mixed"))
    with pytest.raises(ConfigError, match="GradScaler"):
        Learner(model, AdamConfig().init(), 1e-3, grad_scaler=object())
