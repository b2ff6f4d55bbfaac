"""``Learner(..., compile=True)``: the compiled steps give the eager run's losses step
by step, two compiled runs are bit-identical, and gradient accumulation, the LR
scheduler and checkpoints work as in eager runs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ember import Device
from ember.optim import AdamConfig, SgdConfig
from ember.optim.lr_scheduler import CosineAnnealingLrSchedulerConfig
from ember.train import AccuracyMetric, Learner, LossMetric, SupervisedTraining
from tests.train.models import Classifier, loaders, params


def run(tmp_path, compile: bool, epochs: int = 2, accumulation: int | None = None, optim=None, device=None):
    device = device or Device.flex().autodiff()
    device.seed(0)
    train, valid = loaders()
    training = (
        SupervisedTraining(tmp_path)
        .renderer("none")
        .with_metric_logger("jsonl")
        .metric_train_numeric(LossMetric())
        .metric_valid_numeric(LossMetric())
        .metric_valid_numeric(AccuracyMetric())
        .num_epochs(epochs)
    )
    if accumulation:
        training = training.grads_accumulation(accumulation)
    scheduler = CosineAnnealingLrSchedulerConfig(5e-2, 40).init()
    learner = Learner(Classifier.new(device), optim or AdamConfig().init(), scheduler, compile=compile)
    result = training.launch(learner, train, valid)
    logged = {
        split: [json.loads(line)["Loss"] for line in (tmp_path / "logs" / f"{split}.jsonl").read_text().splitlines()]
        for split in ("train", "valid")
    }
    return result, logged, learner


def test_compiled_steps_give_the_eager_losses_step_by_step(tmp_path):
    eager, eager_losses, _ = run(tmp_path / "eager", False)
    compiled, compiled_losses, learner = run(tmp_path / "compiled", True)
    for split in ("train", "valid"):
        assert len(compiled_losses[split]) == len(eager_losses[split]) >= 4
        np.testing.assert_allclose(compiled_losses[split], eager_losses[split], rtol=1e-5)
    for key, value in params(eager.model).items():
        np.testing.assert_allclose(params(compiled.model)[key], value, rtol=1e-5, atol=1e-6)
    stats = learner.compiled.stats()
    # one trace, the steady state's: the first step (no optimizer moments yet) runs
    # eagerly, and so does the last, smaller batch of each epoch (72 = 4 x 16 + 8
    # training and 24 = 16 + 8 validation samples) instead of compiling a plan of its own
    assert stats["update"]["traces"] == 1 and stats["update"]["first"] == 1
    update = stats["update"]
    assert update["traces"] + update["replays"] == 2 * 5 - update["first"] - update["ragged"]  # 2 epochs of 5 batches
    assert stats["update"]["ragged"] == 2 and stats["valid"]["ragged"] == 2 and stats["valid"]["traces"] == 1
    assert stats["update"]["eager"] == 0 and stats["valid"]["eager"] == 0
    assert "compile=True" in repr(learner)


def test_two_compiled_runs_are_bit_identical(tmp_path):
    first, first_losses, _ = run(tmp_path / "a", True)
    second, second_losses, _ = run(tmp_path / "b", True)
    assert first_losses == second_losses
    for key, value in params(first.model).items():
        np.testing.assert_array_equal(params(second.model)[key], value)


def test_gradient_accumulation_compiles_the_gradients(tmp_path):
    eager, eager_losses, _ = run(tmp_path / "eager", False, epochs=1, accumulation=2, optim=SgdConfig().init())
    compiled, compiled_losses, learner = run(
        tmp_path / "compiled", True, epochs=1, accumulation=2, optim=SgdConfig().init()
    )
    np.testing.assert_allclose(compiled_losses["train"], eager_losses["train"], rtol=1e-5)
    for key, value in params(eager.model).items():
        np.testing.assert_allclose(params(compiled.model)[key], value, rtol=1e-5, atol=1e-6)
    assert learner.compiled.stats()["train"]["replays"] > 0


def test_compile_must_be_a_flag():
    from ember.errors import ConfigError

    with pytest.raises(ConfigError, match="compile must be True, False or 'auto'"):
        Learner(Classifier.new(Device.flex().autodiff()), AdamConfig().init(), 1e-3, compile="yes")
