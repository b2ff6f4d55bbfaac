"""The digits CNN of classify_digits.py, trained data parallel over MPI ranks.

    mpiexec -n 2 python examples/distributed.py [--epochs 25] [--artifact-dir runs/digits-ddp]
    python examples/distributed.py            # the same script, one process

Each rank reads its own shard of every batch (``--batch-size`` is the global batch,
split over the ranks), gradients are averaged over the ranks after each backward,
metrics are merged over ranks, and rank 0 alone prints the dashboard and writes the
logs and checkpoints; run it again on the same directory to resume, with any number
of ranks that divides the batch size. Needs ``pip install "ember[dist]"`` (mpi4py and
the mpich wheel) and scikit-learn.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from classify_digits import DigitsBatcher, DigitsCnn

import ember.distributed as dist
from ember import Device
from ember.data import ArrayDataset, DataLoaderBuilder, PartialDataset, ShuffledDataset, TransformDataset
from ember.data.vision.transforms import RandomCrop
from ember.distributed import DataParallel, DistributedSampler
from ember.optim import AdamWConfig
from ember.optim.lr_scheduler import CosineAnnealingLrSchedulerConfig
from ember.train import AccuracyMetric, Learner, LearningRateMetric, LossMetric, SupervisedTraining


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=25)
    parser.add_argument("--batch-size", type=int, default=32, help="the global batch, split over the ranks")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--artifact-dir", default="runs/digits-ddp")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--timeout", type=float, default=None, help="seconds before a silent rank ends the run")
    parser.add_argument("--fresh", action="store_true", help="delete the artifact directory first")
    parser.add_argument("--renderer", default="auto", choices=["auto", "dashboard", "plain", "none"])
    args = parser.parse_args(argv)

    world = dist.init(timeout=args.timeout)  # MPI under mpiexec, one process otherwise
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        sys.exit("This example reads scikit-learn's bundled digits: pip install scikit-learn")
    if args.batch_size % world.size:
        sys.exit(f"--batch-size {args.batch_size} must be divisible by the number of ranks ({world.size})")
    if args.fresh and world.rank == 0:
        shutil.rmtree(args.artifact_dir, ignore_errors=True)
    dist.barrier()

    device = Device.flex().autodiff()
    device.seed(args.seed + world.rank)  # the model comes from rank 0; dropout differs per rank
    digits = load_digits()
    dataset = ShuffledDataset(ArrayDataset(digits.images, digits.target), seed=0)
    train_set, valid_set = PartialDataset.split_fraction(dataset, 0.8)
    # The same augmentation as classify_digits.py: drawn from (seed, epoch, index), so every
    # rank shifts each of its images as a single process would.
    train_set = TransformDataset(train_set, RandomCrop(8, padding=1), seed=args.seed)

    batcher = DigitsBatcher()
    per_rank = args.batch_size // world.size
    train_loader = (
        DataLoaderBuilder(batcher)
        .batch_size(per_rank)
        .sampler(DistributedSampler(shuffle=True, seed=1))
        .build(train_set)
    )
    # Validation: uneven shards, so that every image counts once in the merged metrics.
    valid_loader = (
        DataLoaderBuilder(batcher)
        .batch_size(256)
        .sampler(DistributedSampler(shuffle=False, pad=False))
        .build(valid_set)
    )

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
        strategy=DataParallel(),
    )
    start = time.perf_counter()
    result = training.launch(learner, train_loader, valid_loader)
    accuracy = result.history.find("Accuracy", result.epochs, "valid") or float("nan")
    if world.rank == 0:
        print(
            f"validation accuracy {accuracy:.2f}% after {result.epochs} epochs on {world.size} rank(s) "
            f"({time.perf_counter() - start:.1f}s, {result.model.num_params()} parameters)"
        )
    return accuracy


if __name__ == "__main__":
    main()
