"""``Learner(..., lr_step="epoch")``: the scheduler steps once per epoch (PyTorch's
habit), every iteration of an epoch uses that epoch's rate, and a run resumed inside
an epoch continues with the rate and the schedule of the uninterrupted run."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device
from ember.errors import ConfigError
from ember.optim import AdamConfig, SgdConfig
from ember.optim.lr_scheduler import StepLrSchedulerConfig
from ember.train import Learner, LearningRateMetric, LossMetric, SupervisedTraining
from tests.train.models import Classifier, loaders, params


class StopAfter:
    """A classification training step that asks the training to stop after ``stop_after`` steps."""

    def __init__(self, training=None, stop_after=None):
        self.count, self.training, self.stop_after = 0, training, stop_after

    def __call__(self, model, batch):
        self.count += 1
        if self.stop_after is not None and self.count == self.stop_after:
            self.training.interrupter().stop("stopped by the test")
        return model.forward_classification(batch)


def test_one_rate_per_epoch():
    device = Device.flex().autodiff()
    device.seed(0)
    train, _ = loaders(batch_size=24)  # 3 iterations per epoch
    scheduler = StepLrSchedulerConfig(0.1, step_size=2, gamma=0.5).init()
    training = SupervisedTraining().renderer("none").metric_train_numeric(LearningRateMetric()).num_epochs(5)
    learner = Learner(Classifier.new(device), SgdConfig().init(), scheduler, lr_step="epoch")
    result = training.launch(learner, train)
    rates = [result.history.find("Learning Rate", e, "train") for e in range(1, 6)]
    expected = StepLrSchedulerConfig(0.1, step_size=2, gamma=0.5).init()
    assert rates == pytest.approx([expected.step() for _ in range(5)])  # 0.1, 0.1, 0.05, 0.05, 0.025


def fit(path, stop_after=None, seed=0):
    device = Device.flex().autodiff()
    device.seed(seed)
    training = (
        SupervisedTraining(path)
        .renderer("none")
        .plots(False)
        .metric_train_numeric(LossMetric())
        .metric_train_numeric(LearningRateMetric())
        .num_epochs(3)
    )
    scheduler = StepLrSchedulerConfig(2e-2, step_size=1, gamma=0.5).init()
    step = StopAfter(training, stop_after)
    learner = Learner(
        Classifier.new(device),
        AdamConfig().init(),
        scheduler,
        lr_step="epoch",
        train_step=step,
        valid_step=lambda model, batch: model.forward_classification(batch),
        compile=False,  # StopAfter counts calls: a side effect (compile="auto" would run it eagerly after step 1)
    )
    train, valid = loaders(batch_size=8)  # 9 batches per epoch
    return training.launch(learner, train, valid)


def test_resume_inside_an_epoch_keeps_the_epochs_rate(tmp_path):
    reference = fit(tmp_path / "reference")
    first = fit(tmp_path / "run", stop_after=13)  # epoch 2, after 4 batches
    assert first.interrupted
    resumed = fit(tmp_path / "run", seed=5)
    want, got = params(reference.model), params(resumed.model)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    for epoch in (1, 2, 3):
        assert resumed.history.find("Learning Rate", epoch, "train") == pytest.approx(2e-2 * 0.5 ** (epoch - 1))


def test_bad_lr_step():
    with pytest.raises(ConfigError, match="lr_step must be one of 'iteration', 'epoch'"):
        Learner(Classifier.new(Device.flex().autodiff()), SgdConfig().init(), 0.1, lr_step="batch")
