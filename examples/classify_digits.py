"""Train a small CNN with the Learner on scikit-learn's bundled 8x8 digits (1797
images, 10 classes; nothing to download).

    python examples/classify_digits.py [--epochs 25] [--artifact-dir runs/digits] [--device flex]

The run writes metric logs, plots and checkpoints to the artifact directory; run it
again on the same directory to resume (Ctrl-C saves a checkpoint first), or pass
--fresh to start over. Needs scikit-learn (pip install scikit-learn).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time

import numpy as np

from ember import Device, Module, Tensor
from ember.data import ArrayDataset, DataLoaderBuilder, PartialDataset, ShuffledDataset, TransformDataset
from ember.data.vision.transforms import RandomCrop
from ember.nn import (
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
from ember.optim import AdamWConfig
from ember.optim.lr_scheduler import CosineAnnealingLrSchedulerConfig
from ember.train import (
    AccuracyMetric,
    ClassificationOutput,
    Learner,
    LearningRateMetric,
    LossMetric,
    SupervisedTraining,
)


class DigitsCnn(Module):
    """conv 3x3 (16) -> relu -> conv 3x3 (32) -> relu -> max-pool 2 -> dropout -> linear 64 -> relu -> linear 10."""

    conv1: Conv2d
    conv2: Conv2d
    pool: MaxPool2d
    dropout: Dropout
    fc1: Linear
    fc2: Linear
    act: Relu
    loss: CrossEntropyLoss

    @classmethod
    def new(cls, device: Device) -> DigitsCnn:
        return cls(
            conv1=Conv2dConfig((1, 16), 3, padding="same").init(device),
            conv2=Conv2dConfig((16, 32), 3, padding="same").init(device),
            pool=MaxPool2dConfig(2).init(),
            dropout=DropoutConfig(0.25).init(),
            fc1=LinearConfig(32 * 4 * 4, 64).init(device),
            fc2=LinearConfig(64, 10).init(device),
            act=Relu(),
            loss=CrossEntropyLossConfig().init(),
        )

    def forward(self, images: Tensor) -> Tensor:
        """``images [batch, 1, 8, 8]`` to logits ``[batch, 10]``."""
        x = self.act(self.conv1(images))
        x = self.pool(self.act(self.conv2(x)))
        x = self.dropout(x.flatten(1, 3))
        return self.fc2(self.act(self.fc1(x)))

    def forward_classification(self, batch: tuple[Tensor, Tensor]) -> ClassificationOutput:
        images, targets = batch
        logits = self.forward(images)
        return ClassificationOutput(self.loss(logits, targets), logits, targets)

    # The Learner's step protocols: the training step returns an item with a loss (the
    # learner differentiates it); the validation step runs on model.valid().
    def train_step(self, batch):
        return self.forward_classification(batch)

    def valid_step(self, batch):
        return self.forward_classification(batch)


class DigitsBatcher:
    """``(image [8, 8] in [0, 16], label)`` items to ``(images [batch, 1, 8, 8], labels [batch])``."""

    def batch(self, items, device):
        images = np.stack([image for image, _ in items]).astype(np.float32)[:, None] / 16.0
        labels = np.array([label for _, label in items], dtype=np.int64)
        return Tensor.from_data(images, device=device), Tensor.from_data(labels, device=device)


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=25)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--artifact-dir", default="runs/digits")
    parser.add_argument("--device", default="flex", help="flex, wgpu, vulkan or metal (autodiff is added)")
    parser.add_argument("--workers", type=int, default=1, help="background threads that build batches")
    parser.add_argument("--seed", type=int, default=42, help="seeds the model's initialisation and dropout")
    parser.add_argument("--fresh", action="store_true", help="delete the artifact directory first")
    parser.add_argument(
        "--compile",
        choices=["auto", "on", "off"],
        default="auto",
        help="run the steps under ember.compile: auto (the Learner's default: on flex, unless a step has "
        "Python side effects), on (Learner(compile=True)) or off (eager)",
    )
    parser.add_argument("--renderer", default="auto", choices=["auto", "dashboard", "plain", "none"])
    args = parser.parse_args(argv)

    try:
        from sklearn.datasets import load_digits
    except ImportError:
        sys.exit("This example reads scikit-learn's bundled digits: pip install scikit-learn")
    if args.fresh:
        shutil.rmtree(args.artifact_dir, ignore_errors=True)

    device = Device.parse(args.device).autodiff()
    device.seed(args.seed)
    digits = load_digits()
    dataset = ShuffledDataset(ArrayDataset(digits.images, digits.target), seed=0)
    train_set, valid_set = PartialDataset.split_fraction(dataset, 0.8)
    # Augmentation: each training digit moved by up to one pixel (a crop of the image
    # padded by one), drawn from (seed, epoch, index): new shifts every epoch, the same
    # ones on every run and with any number of workers.
    train_set = TransformDataset(train_set, RandomCrop(8, padding=1), seed=args.seed)

    batcher = DigitsBatcher()
    train_loader = (
        DataLoaderBuilder(batcher).batch_size(args.batch_size).shuffle(1).num_workers(args.workers).build(train_set)
    )
    valid_loader = DataLoaderBuilder(batcher).batch_size(256).build(valid_set)

    steps = args.epochs * len(train_loader)
    training = (
        SupervisedTraining(args.artifact_dir)
        .metric_train_numeric(LossMetric())
        .metric_valid_numeric(LossMetric())
        .metric_train_numeric(AccuracyMetric())
        .metric_valid_numeric(AccuracyMetric())
        .metric_train(LearningRateMetric())
        .num_epochs(args.epochs)
        .renderer(args.renderer)
        .summary()
    )
    learner = Learner(
        DigitsCnn.new(device),
        AdamWConfig(weight_decay=1e-4).init(),
        CosineAnnealingLrSchedulerConfig(args.lr, steps).init(),
        compile={"auto": "auto", "on": True, "off": False}[args.compile],
    )
    start = time.perf_counter()
    result = training.launch(learner, train_loader, valid_loader)
    accuracy = result.history.find("Accuracy", result.epochs, "valid") or float("nan")
    print(
        f"validation accuracy {accuracy:.2f}% after {result.epochs} epochs "
        f"({time.perf_counter() - start:.1f}s, {result.model.num_params()} parameters)"
    )
    return accuracy


if __name__ == "__main__":
    main()
