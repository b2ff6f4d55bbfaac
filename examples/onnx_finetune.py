"""Fine-tune an imported ONNX model with the Learner.

A small CNN is trained in PyTorch on scikit-learn's 8x8 digits *0 to 4 only* and
exported with ``torch.onnx.export`` (a stand-in for a model trained elsewhere; pass
``--onnx model.onnx`` to start from your own, input ``[batch, 1, 8, 8]`` in [0, 1],
output 10 logits). ember imports it, checks its outputs against onnxruntime, and
fine-tunes it on all ten digits with the Learner: validation accuracy goes from at most
~50% (the model has never seen a 5) to ~95%.

    python examples/onnx_finetune.py [--epochs 8] [--artifact-dir runs/onnx_finetune] [--fresh]

Run it again on the same directory to resume from its checkpoints.

Needs onnx, onnxruntime, scikit-learn and (unless --onnx is given) torch:
pip install -e ".[test]" torch
"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
import time
import warnings

import numpy as np

import ember.onnx
from ember import Device, Tensor
from ember.data import ArrayDataset, DataLoaderBuilder, PartialDataset, ShuffledDataset
from ember.nn.loss import CrossEntropyLoss
from ember.optim import AdamConfig
from ember.train import AccuracyMetric, ClassificationOutput, Learner, LossMetric, SupervisedTraining


class DigitsBatcher:
    """``(image [8, 8] in [0, 16], label)`` items to ``(images [batch, 1, 8, 8], labels [batch])``."""

    def batch(self, items, device):
        images = np.stack([image for image, _ in items]).astype(np.float32)[:, None] / 16.0
        labels = np.array([label for _, label in items], dtype=np.int64)
        return Tensor.from_data(images, device=device), Tensor.from_data(labels, device=device)


def pretrain_in_torch(images: np.ndarray, labels: np.ndarray, epochs: int) -> bytes:
    """A CNN trained by PyTorch on the digits 0-4, exported to ONNX with a dynamic batch."""
    import torch

    torch.manual_seed(0)
    nn = torch.nn
    net = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )
    keep = labels < 5
    x = torch.from_numpy(images[keep].astype(np.float32)[:, None] / 16.0)
    y = torch.from_numpy(labels[keep].astype(np.int64))
    generator = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        for batch in torch.randperm(len(x), generator=generator).split(32):
            loss = nn.functional.cross_entropy(net(x[batch]), y[batch])
            net.zero_grad()
            loss.backward()
            with torch.no_grad():  # plain SGD, written out
                for p in net.parameters():
                    p -= 0.1 * p.grad
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(
            net.eval(),
            (x[:2],),
            buffer,
            dynamo=False,
            input_names=["images"],
            output_names=["logits"],
            dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}},
        )
    return buffer.getvalue()


def check_against_onnxruntime(data: bytes, model, images: np.ndarray) -> float:
    """The largest difference between ember's and onnxruntime's logits."""
    import onnxruntime

    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    expected = session.run(None, {name: images})[0]
    got = model.valid()(Tensor.from_data(images)).to_numpy()
    return float(np.max(np.abs(got - expected)) / max(1.0, float(np.max(np.abs(expected)))))


def accuracy(model, images: np.ndarray, labels: np.ndarray) -> float:
    logits = model.valid()(Tensor.from_data(images)).to_numpy()
    return float(np.mean(logits.argmax(1) == labels) * 100)


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--onnx", help="an ONNX digits classifier to start from (default: pretrain one in torch)")
    parser.add_argument("--pretrain-epochs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--artifact-dir", default="runs/onnx_finetune")
    parser.add_argument("--renderer", default="auto", choices=["auto", "dashboard", "plain", "none"])
    parser.add_argument("--fresh", action="store_true", help="delete the artifact directory first (else resume)")
    args = parser.parse_args(argv)
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        sys.exit("This example reads scikit-learn's bundled digits: pip install scikit-learn")
    if args.fresh:
        shutil.rmtree(args.artifact_dir, ignore_errors=True)

    digits = load_digits()
    dataset = ShuffledDataset(ArrayDataset(digits.images, digits.target), seed=0)
    train_set, valid_set = PartialDataset.split_fraction(dataset, 0.8)
    train_images = np.stack([train_set.get(i)[0] for i in range(len(train_set))])
    train_labels = np.array([train_set.get(i)[1] for i in range(len(train_set))])
    valid_images = np.stack([valid_set.get(i)[0] for i in range(len(valid_set))]).astype(np.float32)[:, None] / 16
    valid_labels = np.array([valid_set.get(i)[1] for i in range(len(valid_set))])

    if args.onnx:
        with open(args.onnx, "rb") as f:
            data = f.read()
    else:
        try:
            data = pretrain_in_torch(train_images, train_labels, args.pretrain_epochs)
        except ImportError:
            sys.exit("Without --onnx this example makes its model with PyTorch: pip install torch")

    print(ember.onnx.describe(data))
    device = Device.flex().autodiff()
    device.seed(0)
    model = ember.onnx.load(data, device)
    difference = check_against_onnxruntime(data, model, valid_images)
    print(f"ember against onnxruntime: largest relative difference {difference:.1e}")
    if difference > 1e-5:
        sys.exit("the import does not match onnxruntime")
    before = accuracy(model, valid_images, valid_labels)
    print(f"imported model: validation accuracy {before:.1f}% on all ten digits")

    loss_fn = CrossEntropyLoss()

    def step(model, batch):
        images, labels = batch
        logits = model(images)
        return ClassificationOutput(loss_fn.forward(logits, labels), logits, labels)

    batcher = DigitsBatcher()
    train_loader = DataLoaderBuilder(batcher).batch_size(32).shuffle(1).build(train_set)
    valid_loader = DataLoaderBuilder(batcher).batch_size(256).build(valid_set)
    training = (
        SupervisedTraining(args.artifact_dir)
        .metric_train_numeric(LossMetric())
        .metric_valid_numeric(LossMetric())
        .metric_valid_numeric(AccuracyMetric())
        .num_epochs(args.epochs)
        .renderer(args.renderer)
        .summary()
    )
    start = time.perf_counter()
    result = training.launch(
        Learner(model, AdamConfig().init(), args.lr, train_step=step, valid_step=step), train_loader, valid_loader
    )
    after = accuracy(result.model, valid_images, valid_labels)
    result.model.save_file(f"{args.artifact_dir}/finetuned.safetensors")
    print(
        f"fine-tuned: validation accuracy {before:.1f}% -> {after:.1f}% after {result.epochs} epochs "
        f"({time.perf_counter() - start:.1f}s); weights in {args.artifact_dir}/finetuned.safetensors"
    )
    return after


if __name__ == "__main__":
    main()
