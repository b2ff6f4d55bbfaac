"""Early stopping on a metric's epoch history, in isolation and in a fit."""

from __future__ import annotations

import pytest

from ember import Device, Tensor
from ember.errors import ConfigError
from ember.optim import AdamConfig
from ember.train import (
    AccuracyMetric,
    Learner,
    LossMetric,
    MetricEarlyStoppingStrategy,
    MetricHistory,
    SupervisedTraining,
)
from tests.train.models import Classifier, loaders


def decisions(strategy, values, split="valid", name="Loss"):
    history, out = MetricHistory(), []
    for epoch, value in enumerate(values, start=1):
        history.record(split, epoch, {name: value})
        out.append(strategy.should_stop(epoch, history))
    return out


def test_never_stops_while_improving():
    assert decisions(MetricEarlyStoppingStrategy(LossMetric(), 1), [0.5, 0.4, 0.3, 0.2]) == [False] * 4


def test_stops_after_patience_epochs_without_improvement():
    strategy = MetricEarlyStoppingStrategy(LossMetric(), 2)
    assert decisions(strategy, [1.0, 0.5, 0.6, 0.7, 0.4]) == [False, False, False, True, False]
    assert (strategy.best_epoch, strategy.best_value) == (5, 0.4)


def test_equal_values_do_not_improve():
    assert decisions(MetricEarlyStoppingStrategy(LossMetric(), 2), [0.5, 0.5, 0.5]) == [False, False, True]


def test_highest_direction_from_the_metric_and_min_delta():
    strategy = MetricEarlyStoppingStrategy(AccuracyMetric(), 2, min_delta=1.0)
    # +0.5 is below min_delta: no improvement counted after epoch 1
    assert decisions(strategy, [80.0, 80.5, 80.9], name="Accuracy") == [False, False, True]


def test_warmup():
    strategy = MetricEarlyStoppingStrategy(LossMetric(), 1, warmup_epochs=3)
    assert decisions(strategy, [0.5, 0.6, 0.7, 0.8]) == [False, False, False, True]


def test_train_split_and_errors():
    assert decisions(MetricEarlyStoppingStrategy("Loss", 1, split="train", direction="lowest"), [1, 2], "train") == [
        False,
        True,
    ]
    with pytest.raises(ConfigError, match="patience must be an int >= 1"):
        MetricEarlyStoppingStrategy(LossMetric(), 0)
    with pytest.raises(ConfigError, match="direction='lowest' or 'highest'"):
        MetricEarlyStoppingStrategy("Loss", 2)
    with pytest.raises(ConfigError, match="unknown split"):
        MetricEarlyStoppingStrategy(LossMetric(), 2, split="test")


def test_fit_stops_early(tmp_path):
    losses = iter([1.0, 0.5, 0.6, 0.7, 0.4, 0.3])

    def scripted_valid(model, batch):
        item = model.forward_classification(batch)
        item.loss = Tensor.from_floats([next(losses)])
        return item

    train, valid = loaders(batch_size=16)
    valid = valid.slice(0, 16)  # one validation batch per epoch
    training = (
        SupervisedTraining(tmp_path)
        .renderer("none")
        .metric_valid_numeric(LossMetric())
        .num_epochs(6)
        .early_stopping(LossMetric(), patience=2)
    )
    result = training.launch(
        Learner(Classifier.new(Device.flex().autodiff()), AdamConfig().init(), 1e-2, valid_step=scripted_valid),
        train,
        valid,
    )
    assert result.stopped_early and not result.interrupted and result.epochs == 4
    assert "has not improved for 2 epochs (best 0.5 at epoch 2)" in result.summary.stopped
    assert "Stopped after epoch 4" in (tmp_path / "experiment.log").read_text()
