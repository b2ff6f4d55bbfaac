"""The Learner loop: training, steps as methods or functions, metrics per epoch,
gradient accumulation, logs, plots, the summary and the error paths."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from ember import Device
from ember.data import ArrayDataset, DataLoaderBuilder, DefaultBatcher
from ember.errors import ConfigError, DeviceError
from ember.optim import AdamConfig, GradientsAccumulator, GradientsParams, SgdConfig
from ember.optim.lr_scheduler import LinearLrSchedulerConfig
from ember.train import (
    AccuracyMetric,
    Learner,
    LearningRateMetric,
    LossMetric,
    PlainRenderer,
    SupervisedTraining,
    TrainOutput,
)
from tests.train.models import Classifier, Regressor, cross_entropy, loaders, params, regression_step


def quiet(artifact_dir=None) -> SupervisedTraining:
    return SupervisedTraining(artifact_dir).renderer("none")


@pytest.fixture
def ad():
    device = Device.flex().autodiff()
    device.seed(0)
    return device


def test_fit_learns_and_reports(ad):
    train, valid = loaders()
    training = (
        quiet()
        .metric_train_numeric(LossMetric())
        .metric_valid_numeric(LossMetric())
        .metric_valid_numeric(AccuracyMetric())
        .num_epochs(8)
    )
    result = training.launch(Learner(Classifier.new(ad), AdamConfig().init(), 5e-2), train, valid)
    model, summary = result
    assert model is result.model and result.epochs == 8 and not result.interrupted
    losses = [v for _, v in result.history.series("Loss", "train")]
    assert losses[-1] < 0.5 * losses[0]
    assert summary.get("Accuracy", "valid").final > 80.0
    assert model.devices() == [ad]


def test_epoch_values_match_a_hand_computation(ad):
    """The valid Loss and Accuracy of an epoch equal the per-sample mean over the
    whole validation set (batches of unequal size weighted correctly)."""
    x = np.random.default_rng(3).normal(size=(23, 4)).astype(np.float32)
    y = np.arange(23) % 3
    train = DataLoaderBuilder(DefaultBatcher()).batch_size(5).set_device(Device.flex()).build(ArrayDataset(x, y))
    valid = DataLoaderBuilder(DefaultBatcher()).batch_size(10).set_device(Device.flex()).build(ArrayDataset(x, y))
    training = quiet().metric_valid_numeric(LossMetric()).metric_valid_numeric(AccuracyMetric())
    result = training.launch(Learner(Classifier.new(ad), SgdConfig().init(), 0.0), train, valid)
    model = result.model.valid()
    logits = model(Tensor_from(x)).to_numpy().astype(np.float64)
    logp = (
        logits
        - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True))
        - logits.max(1, keepdims=True)
    )
    expected_loss = -logp[np.arange(23), y].mean()
    assert result.history.find("Loss", 1, "valid") == pytest.approx(expected_loss, rel=1e-5)
    assert result.history.find("Accuracy", 1, "valid") == pytest.approx(100 * np.mean(logits.argmax(1) == y))


def Tensor_from(x):
    from ember import Tensor

    return Tensor.from_data(x, device=Device.flex())


def test_step_functions_and_default_loss_metric(ad):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 3)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5]]) + 0.3).astype(np.float32)
    loader = (
        DataLoaderBuilder(DefaultBatcher())
        .batch_size(16)
        .shuffle(0)
        .set_device(Device.flex())
        .build(ArrayDataset(x, y))
    )
    learner = Learner(
        Regressor.new(ad), AdamConfig().init(), 0.1, train_step=regression_step, valid_step=regression_step
    )
    result = quiet().num_epochs(30).launch(learner, loader, loader)
    assert result.history.names() == ["Loss"]  # registered by default for both splits
    assert result.history.find("Loss", 30, "valid") < 0.05
    assert learner.model is result.model


def test_train_output_is_accepted(ad):
    class Explicit(Classifier):
        def train_step(self, batch):
            item = self.forward_classification(batch)
            return TrainOutput.new(self, item.loss.backward(), item)

    train, valid = loaders()
    result = quiet().num_epochs(2).launch(Learner(Explicit.new(ad), AdamConfig().init(), 1e-2), train, valid)
    assert result.epochs == 2


def test_learning_rate_metric_follows_the_scheduler(ad):
    train, _ = loaders(batch_size=24)  # 72 items: 3 iterations per epoch
    scheduler = LinearLrSchedulerConfig(1e-2, 1e-3, 6).init()
    training = quiet().metric_train_numeric(LearningRateMetric()).num_epochs(2)
    result = training.launch(Learner(Classifier.new(ad), SgdConfig().init(), scheduler), train)
    expected = LinearLrSchedulerConfig(1e-2, 1e-3, 6).init()
    rates = [expected.step() for _ in range(6)]
    assert result.history.find("Learning Rate", 1, "train") == pytest.approx(np.mean(rates[:3]))
    assert result.history.find("Learning Rate", 2, "train") == pytest.approx(np.mean(rates[3:]))


def test_gradient_accumulation_matches_summed_gradients(ad):
    """Two accumulated batches of 8 step like the sum of their gradients."""
    x, y = np.random.default_rng(5).normal(size=(32, 4)).astype(np.float32), np.arange(32) % 3
    loader = DataLoaderBuilder(DefaultBatcher()).batch_size(8).set_device(Device.flex()).build(ArrayDataset(x, y))
    ad.seed(7)
    start = Classifier.new(ad)
    start = start.fork(ad)  # materialise
    result = quiet().grads_accumulation(2).launch(Learner(start, SgdConfig().init(), 0.1), loader)

    model, optim = start, SgdConfig().init()
    flex = Device.flex()
    batches = list(DataLoaderBuilder(DefaultBatcher()).batch_size(8).set_device(ad).build(ArrayDataset(x, y)))
    for pair in (batches[:2], batches[2:]):
        acc = GradientsAccumulator()
        for bx, by in pair:
            loss = cross_entropy(model(bx), by)
            acc.accumulate(model, GradientsParams.from_grads(loss.backward(), model))
        model = optim.step(0.1, model, acc.grads())
    del flex
    for key, value in params(model).items():
        np.testing.assert_allclose(params(result.model)[key], value, rtol=1e-6, atol=1e-7)


def test_files_in_the_artifact_directory(tmp_path, ad):
    train, valid = loaders()
    training = (
        quiet(tmp_path)
        .metric_train_numeric(LossMetric())
        .metric_valid_numeric(LossMetric())
        .metric_valid_numeric(AccuracyMetric())
        .num_epochs(3)
    )
    training.launch(Learner(Classifier.new(ad), AdamConfig().init(), 1e-2), train, valid)
    with (tmp_path / "logs" / "train.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 3 * len(train) and set(rows[0]) == {"epoch", "iteration", "items", "Loss"}
    assert rows[-1]["epoch"] == "3" and int(rows[0]["items"]) == 16
    with (tmp_path / "logs" / "epochs.csv").open() as handle:
        epochs = list(csv.DictReader(handle))
    assert [(r["epoch"], r["split"]) for r in epochs] == [(str(e), s) for e in (1, 2, 3) for s in ("train", "valid")]
    assert epochs[-1]["Accuracy"] != "" and epochs[0]["Accuracy"] == ""
    for name in ("Loss", "Accuracy"):
        png = (tmp_path / "plots" / f"{name}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["epochs"] == 3 and {m["name"] for m in summary["metrics"]} == {"Loss", "Accuracy"}
    assert "epoch 3/3 done" in (tmp_path / "experiment.log").read_text()
    assert sorted(p.name for p in (tmp_path / "checkpoint").iterdir()) == ["epoch-0002", "epoch-0003"]


def test_jsonl_logger(tmp_path, ad):
    train, valid = loaders()
    quiet(tmp_path).with_metric_logger("jsonl").num_epochs(1).launch(
        Learner(Classifier.new(ad), AdamConfig().init(), 1e-2), train, valid
    )
    lines = (tmp_path / "logs" / "valid.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    assert len(lines) == len(valid) and first["epoch"] == 1 and first["iteration"] == 1 and "Loss" in first


def test_plots_skipped_without_matplotlib(tmp_path, ad, monkeypatch):
    import ember.train.loop as loop

    monkeypatch.setattr(loop, "matplotlib_available", lambda: False)
    out = io.StringIO()
    train, valid = loaders()
    SupervisedTraining(tmp_path).renderer(PlainRenderer(out)).num_epochs(2).launch(
        Learner(Classifier.new(ad), AdamConfig().init(), 1e-2), train, valid
    )
    assert out.getvalue().count("Plots skipped: matplotlib is not installed") == 1
    assert not (tmp_path / "plots").exists()


def test_summary_is_printed(ad):
    out = io.StringIO()
    train, valid = loaders()
    training = (
        SupervisedTraining()
        .renderer(PlainRenderer(out))
        .metric_valid_numeric(AccuracyMetric())
        .metric_train_numeric(LossMetric())
        .num_epochs(2)
        .summary()
    )
    training.launch(Learner(Classifier.new(ad), AdamConfig().init(), 1e-2), train, valid)
    text = out.getvalue()
    table = text[text.index("Learner Summary") :].splitlines()
    assert table[1].startswith("Epochs: 2")
    rows = {tuple(c.strip() for c in line.strip("|").split("|")[:2]) for line in table[4:]}
    assert rows == {("Train", "Loss"), ("Valid", "Accuracy")}


def test_errors(ad):
    train, valid = loaders()
    with pytest.raises(
        DeviceError, match=r"does not track gradients; build the model on Device<Flex\(Cpu\)>.autodiff\(\)"
    ):
        quiet().launch(Learner(Classifier.new(Device.flex()), AdamConfig().init(), 1e-2), train, valid)
    with pytest.raises(ConfigError, match="has no train_step"):
        quiet().launch(Learner(Regressor.new(ad), AdamConfig().init(), 1e-2), train)
    with pytest.raises(ConfigError, match="lr_scheduler must be a learning rate"):
        Learner(Classifier.new(ad), AdamConfig().init(), "fast")
    with pytest.raises(ConfigError, match="optim must be a module optimizer"):
        Learner(Classifier.new(ad), AdamConfig(), 1e-3)
    with pytest.raises(ConfigError, match="must be a DataLoader"):
        quiet().launch(Learner(Classifier.new(ad), AdamConfig().init(), 1e-2), [1, 2, 3])
    with pytest.raises(ConfigError, match="already registered"):
        quiet().metric_train(LossMetric()).metric_train(LossMetric())
    with pytest.raises(ConfigError, match="exists only in training"):
        quiet().metric_valid(LearningRateMetric())
    with pytest.raises(ConfigError, match="num_epochs: expected an int >= 1"):
        quiet().num_epochs(0)
    with pytest.raises(ConfigError, match=r"patience"):
        quiet().early_stopping(LossMetric())
    with pytest.raises(ConfigError, match="renderer"):
        quiet().renderer("fancy")
    with pytest.raises(ConfigError, match=r"reads the valid metric 'Accuracy'.*metric_valid_numeric"):
        quiet().metric_valid_numeric(LossMetric()).early_stopping(AccuracyMetric(), patience=2).launch(
            Learner(Classifier.new(ad), AdamConfig().init(), 1e-2), train, valid
        )


def test_build_then_fit_and_the_default_setup(ad):
    train, valid = loaders()
    learner = (
        quiet()
        .metric_valid_numeric(AccuracyMetric())
        .num_epochs(2)
        .build(Classifier.new(ad), AdamConfig().init(), 1e-2)
    )
    model, summary = learner.fit(train, valid)
    assert summary.epochs == 2 and summary.get("Accuracy", "valid") is not None and learner.model is model
    plain = Learner(Classifier.new(ad), AdamConfig().init(), 1e-2)
    result = plain.fit(train)  # the default setup: one epoch, nothing written, no validation
    assert result.epochs == 1 and result.history.names("valid") == [] and result.checkpoint is None


def test_valid_metrics_without_a_valid_loader(tmp_path, ad):
    """The default checkpoint strategy only reads the validation loss when there is a validation."""
    train, _ = loaders()
    result = (
        quiet(tmp_path)
        .metric_valid_numeric(LossMetric())
        .launch(Learner(Classifier.new(ad), AdamConfig().init(), 1e-2), train)
    )
    assert result.epochs == 1 and result.checkpoint.name == "epoch-0001"


def test_a_failing_plot_is_a_note_and_the_run_goes_on(tmp_path, ad, monkeypatch):
    """Plots are drawn on the plotter's thread; a drawing that raises becomes one note
    when fit ends, and the training result is unaffected."""
    import ember.train.plot as plot

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(plot, "plot_history", broken)
    out = io.StringIO()
    train, valid = loaders()
    result = (
        SupervisedTraining(tmp_path)
        .renderer(PlainRenderer(out))
        .num_epochs(2)
        .launch(Learner(Classifier.new(ad), AdamConfig().init(), 1e-2), train, valid)
    )
    assert result.epochs == 2 and out.getvalue().count("Plots failed: OSError: disk full") == 1
