"""Train a CNN on MNIST with the Learner, from the IDX files you supply (ember
downloads nothing).

    python examples/mnist.py DATA_DIR [--epochs 4] [--artifact-dir runs/mnist] [--limit 10000]

DATA_DIR holds the four files of the MNIST page, gzipped or not:
train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
t10k-labels-idx1-ubyte. Checkpoints, logs and plots go to the artifact directory;
run again to resume (Ctrl-C saves a checkpoint first).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from ember import Device, Module, Tensor
from ember.data import DataLoaderBuilder, MnistDataset, PartialDataset, ShuffledDataset
from ember.errors import RecordError
from ember.nn import (
    BatchNorm,
    BatchNormConfig,
    Conv2d,
    Conv2dConfig,
    Dropout,
    DropoutConfig,
    Linear,
    LinearConfig,
    MaxPool2d,
    MaxPool2dConfig,
    Relu,
)
from ember.nn.loss import CrossEntropyLoss, CrossEntropyLossConfig
from ember.optim import AdamConfig
from ember.optim.lr_scheduler import CosineAnnealingLrSchedulerConfig
from ember.train import (
    AccuracyMetric,
    ClassificationOutput,
    CpuMemory,
    IterationSpeedMetric,
    Learner,
    LossMetric,
    SupervisedTraining,
    TopKAccuracyMetric,
)

MEAN, STD = 0.1307, 0.3081  # of MNIST's training pixels in [0, 1]


class MnistCnn(Module):
    """Two conv blocks (conv 3x3, batch norm, relu, max-pool 2), then 128 hidden units."""

    conv1: Conv2d
    norm1: BatchNorm
    conv2: Conv2d
    norm2: BatchNorm
    pool: MaxPool2d
    dropout: Dropout
    fc1: Linear
    fc2: Linear
    act: Relu
    loss: CrossEntropyLoss

    @classmethod
    def new(cls, device: Device) -> MnistCnn:
        return cls(
            conv1=Conv2dConfig((1, 16), 3, padding="same").init(device),
            norm1=BatchNormConfig(16).init(device),
            conv2=Conv2dConfig((16, 32), 3, padding="same").init(device),
            norm2=BatchNormConfig(32).init(device),
            pool=MaxPool2dConfig(2).init(),
            dropout=DropoutConfig(0.3).init(),
            fc1=LinearConfig(32 * 7 * 7, 128).init(device),
            fc2=LinearConfig(128, 10).init(device),
            act=Relu(),
            loss=CrossEntropyLossConfig().init(),
        )

    def forward(self, images: Tensor) -> Tensor:
        x = self.pool(self.act(self.norm1(self.conv1(images))))
        x = self.pool(self.act(self.norm2(self.conv2(x))))
        x = self.dropout(x.flatten(1, 3))
        return self.fc2(self.act(self.fc1(x)))

    def forward_classification(self, batch):
        images, targets = batch
        logits = self.forward(images)
        return ClassificationOutput(self.loss(logits, targets), logits, targets)

    def train_step(self, batch):
        return self.forward_classification(batch)

    def valid_step(self, batch):
        return self.forward_classification(batch)


class MnistBatcher:
    """MnistItems to normalised images ``[batch, 1, 28, 28]`` and labels ``[batch]``."""

    def batch(self, items, device):
        images = np.stack([item.image for item in items])[:, None] / 255.0
        images = ((images - MEAN) / STD).astype(np.float32)
        labels = np.array([item.label for item in items], dtype=np.int64)
        return Tensor.from_data(images, device=device), Tensor.from_data(labels, device=device)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data_dir", help="the folder with the four MNIST IDX files")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--limit", type=int, default=None, help="train on the first N (shuffled) images only")
    parser.add_argument("--artifact-dir", default="runs/mnist")
    parser.add_argument("--device", default="flex", help="flex, wgpu, vulkan or metal (autodiff is added)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)

    try:
        train_set, test_set = MnistDataset.train(args.data_dir), MnistDataset.test(args.data_dir)
    except RecordError as error:
        sys.exit(f"{error}\n\nPut the MNIST IDX files in {args.data_dir!r} (see this script's docstring).")
    train_set = ShuffledDataset(train_set, seed=0)
    if args.limit:
        train_set = PartialDataset(train_set, 0, args.limit)

    device = Device.parse(args.device).autodiff()
    device.seed(0)
    batcher = MnistBatcher()
    train_loader = (
        DataLoaderBuilder(batcher).batch_size(args.batch_size).shuffle(1).num_workers(args.workers).build(train_set)
    )
    test_loader = DataLoaderBuilder(batcher).batch_size(500).num_workers(args.workers).build(test_set)

    training = (
        SupervisedTraining(args.artifact_dir)
        .metric_train_numeric(LossMetric())
        .metric_valid_numeric(LossMetric())
        .metric_train_numeric(AccuracyMetric())
        .metric_valid_numeric(AccuracyMetric())
        .metric_valid_numeric(TopKAccuracyMetric(2))
        .metric_train(IterationSpeedMetric(items=True))
        .metric_train(CpuMemory())
        .num_epochs(args.epochs)
        .early_stopping(LossMetric(), patience=2)
        .summary()
    )
    scheduler = CosineAnnealingLrSchedulerConfig(args.lr, args.epochs * len(train_loader)).init()
    result = training.launch(Learner(MnistCnn.new(device), AdamConfig().init(), scheduler), train_loader, test_loader)
    accuracy = result.history.find("Accuracy", result.epochs, "valid")
    if accuracy is not None:
        print(f"test accuracy {accuracy:.2f}% after {result.epochs} epochs")


if __name__ == "__main__":
    main()
