"""TensorBoard event files from the Learner (``logger_tensorboard``), read back with
TensorBoard's own event reader."""

from __future__ import annotations

import os

import numpy as np
import pytest

from ember import Device
from ember.errors import ConfigError
from ember.optim import AdamConfig
from ember.optim.lr_scheduler import LinearLrSchedulerConfig
from ember.train import AccuracyMetric, Learner, LossMetric, SupervisedTraining
from ember.train.tensorboard import LR_TAG, tag
from tests.conftest import REQUIRE_TORCH
from tests.train.models import Classifier, loaders


def event_accumulator():
    """TensorBoard's EventAccumulator, or a skip (a failure when EMBER_REQUIRE_TORCH=1, as in CI)."""
    try:
        import tensorboardX  # noqa: F401
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError as error:
        if REQUIRE_TORCH:
            pytest.fail(f"tensorboardX and tensorboard are required (EMBER_REQUIRE_TORCH=1): {error}")
        pytest.skip(f"tensorboardX or tensorboard is not installed: {error}")
    return EventAccumulator


def read(directory):
    accumulator = event_accumulator()(str(directory), size_guidance={"scalars": 0, "histograms": 0})
    accumulator.Reload()
    return accumulator


@pytest.fixture
def ad():
    device = Device.flex().autodiff()
    device.seed(0)
    return device


def test_scalars_and_histograms_read_back(tmp_path, ad):
    event_accumulator()
    train, valid = loaders()
    training = (
        SupervisedTraining(tmp_path)
        .renderer("none")
        .plots(False)
        .metric_train_numeric(LossMetric())
        .metric_valid_numeric(LossMetric())
        .metric_valid_numeric(AccuracyMetric())
        .num_epochs(3)
        .logger_tensorboard(histograms_every=2, steps_every=2)
    )
    scheduler = LinearLrSchedulerConfig(1e-2, 1e-3, 3 * len(train)).init()
    model = Classifier.new(ad)
    result = training.launch(Learner(model, AdamConfig().init(), scheduler), train, valid)
    events = read(tmp_path / "tensorboard")
    scalars = set(events.Tags()["scalars"])

    for split, names in (("train", ["Loss"]), ("valid", ["Loss", "Accuracy"])):
        for name in names:
            logged = [(e.step, e.value) for e in events.Scalars(tag(split, name))]
            expected = result.history.series(name, split)
            assert [s for s, _ in logged] == [e for e, _ in expected]
            np.testing.assert_allclose([v for _, v in logged], [v for _, v in expected], rtol=1e-6)
    assert tag("train", "Accuracy") not in scalars

    # Steps: every 2nd step of the run, train and valid; the rate of each logged step.
    n = len(train)
    steps = [e.step for e in events.Scalars(tag("train", "Loss", step=True))]
    assert steps == list(range(2, 3 * n + 1, 2))
    assert [e.step for e in events.Scalars(tag("valid", "Accuracy", step=True))] == list(
        range(2, 3 * len(valid) + 1, 2)
    )
    lrs = [(e.step, e.value) for e in events.Scalars(tag("train", "lr", step=True))]
    expected_lr = LinearLrSchedulerConfig(1e-2, 1e-3, 3 * n).init()
    rates = [expected_lr.step() for _ in range(3 * n)]
    np.testing.assert_allclose([v for _, v in lrs], [rates[s - 1] for s, _ in lrs], rtol=1e-6)
    epoch_lr = [(e.step, e.value) for e in events.Scalars(LR_TAG)]
    assert [s for s, _ in epoch_lr] == [1, 2, 3]
    np.testing.assert_allclose([v for _, v in epoch_lr], [rates[e * n - 1] for e in (1, 2, 3)], rtol=1e-6)

    # Histograms of every parameter, at epoch 2 only (histograms_every=2).
    paths = [p for p, _ in result.model.named_params()]
    assert sorted(events.Tags()["histograms"]) == sorted(f"params/{p}" for p in paths)
    for path, param in result.model.named_params():
        (histogram,) = events.Histograms(f"params/{path}")
        assert histogram.step == 2 and histogram.histogram_value.num == param.val().to_numpy().size


def test_log_dir_and_no_steps(tmp_path, ad):
    event_accumulator()
    train, _ = loaders()
    SupervisedTraining().renderer("none").num_epochs(2).logger_tensorboard(
        tmp_path / "tb", histograms_every=None, steps_every=None
    ).launch(Learner(Classifier.new(ad), AdamConfig().init(), 1e-2), train)
    tags = read(tmp_path / "tb").Tags()
    assert sorted(tags["scalars"]) == sorted([tag("train", "Loss"), LR_TAG]) and tags["histograms"] == []


def test_needs_a_directory(ad):
    event_accumulator()
    train, _ = loaders()
    training = SupervisedTraining().renderer("none").logger_tensorboard()
    with pytest.raises(ConfigError, match="log_dir"):
        training.launch(Learner(Classifier.new(ad), AdamConfig().init(), 1e-2), train)


def test_bad_counts():
    event_accumulator()
    with pytest.raises(ConfigError, match="histograms_every"):
        SupervisedTraining().logger_tensorboard(histograms_every=0)
    with pytest.raises(ConfigError, match="steps_every"):
        SupervisedTraining().logger_tensorboard(steps_every=True)


def test_missing_tensorboardx_names_the_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # import raises ImportError
    with pytest.raises(ImportError, match="pip install tensorboardX"):
        SupervisedTraining(os.devnull).logger_tensorboard()
