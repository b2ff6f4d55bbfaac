"""Small models and data for the Learner tests (importable by subprocess scripts)."""

from __future__ import annotations

import time

import numpy as np

from ember import Device, Module, Tensor
from ember.data import ArrayDataset, DataLoaderBuilder, DefaultBatcher
from ember.nn import Linear, LinearConfig, Relu
from ember.tensor.activation import log_softmax
from ember.train import ClassificationOutput, RegressionOutput


def cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean negative log-likelihood of integer targets."""
    picked = log_softmax(logits, 1).gather(1, targets.unsqueeze_dim(1))
    return picked.mean().neg()


class Classifier(Module):
    l1: Linear
    act: Relu
    l2: Linear
    delay: float = 0.0

    @classmethod
    def new(cls, device: Device, d_in: int = 4, hidden: int = 16, classes: int = 3, delay: float = 0.0) -> Classifier:
        return cls(LinearConfig(d_in, hidden).init(device), Relu(), LinearConfig(hidden, classes).init(device), delay)

    def forward(self, x: Tensor) -> Tensor:
        return self.l2(self.act(self.l1(x)))

    def forward_classification(self, batch) -> ClassificationOutput:
        x, y = batch
        logits = self.forward(x)
        return ClassificationOutput(cross_entropy(logits, y), logits, y)

    def train_step(self, batch):
        if self.delay:
            time.sleep(self.delay)
        return self.forward_classification(batch)

    def valid_step(self, batch):
        return self.forward_classification(batch)


class Regressor(Module):
    l1: Linear

    @classmethod
    def new(cls, device: Device) -> Regressor:
        return cls(LinearConfig(3, 1).init(device))

    def forward(self, x: Tensor) -> Tensor:
        return self.l1(x)


def regression_step(model: Regressor, batch) -> RegressionOutput:
    x, y = batch
    out = model(x)
    diff = out.sub(y)
    return RegressionOutput(diff.mul(diff).mean(), out, y)


def blobs(n: int = 96, d: int = 4, classes: int = 3, seed: int = 0):
    """Gaussian blobs: learnable in a few epochs."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=3.0, size=(classes, d))
    y = rng.integers(0, classes, n)
    x = centers[y] + rng.normal(size=(n, d))
    return x.astype(np.float32), y.astype(np.int64)


def loaders(batch_size: int = 16, seed: int = 0, workers: int = 0, n: int = 96):
    x, y = blobs(n, seed=seed)
    cut = int(0.75 * n)
    flex = Device.flex()
    train = (
        DataLoaderBuilder(DefaultBatcher())
        .batch_size(batch_size)
        .shuffle(seed + 1)
        .num_workers(workers)
        .set_device(flex)
        .build(ArrayDataset(x[:cut], y[:cut]))
    )
    valid = (
        DataLoaderBuilder(DefaultBatcher())
        .batch_size(batch_size)
        .set_device(flex)
        .build(ArrayDataset(x[cut:], y[cut:]))
    )
    return train, valid


def params(model: Module) -> dict[str, np.ndarray]:
    return {path: p.val().to_numpy() for path, p in model.named_params()}
