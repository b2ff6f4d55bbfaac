"""What the user sees: the plain renderer's lines, the dashboard, the default choice,
and the Interrupter's handling of Ctrl-C."""

from __future__ import annotations

import io
import os
import re
import signal
import sys

import pytest

from ember import Device
from ember.optim import AdamConfig
from ember.train import AccuracyMetric, Interrupter, Learner, LossMetric, PlainRenderer, SupervisedTraining
from ember.train.metric import MetricEntry, Split
from ember.train.renderer import EpochReport, TrainingInfo, TrainingProgress, default_renderer
from tests.train.models import Classifier, loaders


def entry(name, value, text):
    return MetricEntry(name, value, value, f"{name} {text}")


def test_plain_renderer_lines():
    out = io.StringIO()
    r = PlainRenderer(out, lines_per_epoch=2)
    r.start(TrainingInfo(3, 1, 4, 2, model="Mlp", num_params=97, device="Device<Flex(Cpu)>", artifact_dir="runs/a"))
    for i in range(1, 5):
        r.update(TrainingProgress(Split.TRAIN, 1, 3, i, 4, 8 * i, 32, eta=75.0), [entry("Loss", 0.5, "0.5000")])
    r.update(
        TrainingProgress(Split.VALID, 1, 3, 1, 1, 8, 8, eta=None),
        [entry("Loss", 0.4, "0.4000"), entry("Accuracy", 90.0, "90.00%")],
    )
    r.epoch_end(EpochReport(1, 3, 1.234, [entry("Loss", 0.5, "0.5000")], [entry("Accuracy", 90.0, "90.00%")]))
    r.message("Saved checkpoint epoch-0001")
    r.end("SUMMARY")
    assert out.getvalue().splitlines() == [
        "Training Mlp (97 params, on Device<Flex(Cpu)>, 3 epochs, 4 train / 2 valid iterations per epoch)",
        "Artifacts: runs/a",
        "[train] epoch 1/3 iter 2/4 (50%) | Loss 0.5000 | eta 01:15",
        "[train] epoch 1/3 iter 4/4 (100%) | Loss 0.5000 | eta 01:15",
        "[valid] epoch 1/3 iter 1/1 (100%) | Loss 0.4000, Accuracy 90.00% | eta --:--",
        "epoch 1/3 done in 1.23s | train: Loss 0.5000 | valid: Accuracy 90.00%",
        "Saved checkpoint epoch-0001",
        "SUMMARY",
    ]


def test_plain_renderer_in_a_fit():
    out = io.StringIO()
    train, valid = loaders(batch_size=8)  # 9 train, 3 valid batches
    training = (
        SupervisedTraining()
        .renderer(PlainRenderer(out, lines_per_epoch=3))
        .metric_train_numeric(LossMetric())
        .metric_valid_numeric(AccuracyMetric())
        .num_epochs(2)
    )
    training.launch(Learner(Classifier.new(Device.flex().autodiff()), AdamConfig().init(), 1e-2), train, valid)
    lines = out.getvalue().splitlines()
    train_lines = [line for line in lines if line.startswith("[train] epoch 1/2")]
    assert [re.search(r"iter (\d+)/9", line).group(1) for line in train_lines] == ["3", "6", "9"]
    assert all(re.search(r"\| Loss \d\.\d{4} \| eta \d\d:\d\d$", line) for line in train_lines)
    done = [line for line in lines if " done in " in line]
    assert len(done) == 2 and re.match(
        r"epoch 2/2 done in [\d.]+s \| train: Loss [\d.]+ \| valid: Accuracy [\d.]+%$", done[1]
    )
    assert "\x1b" not in out.getvalue()  # no terminal control codes


def test_dashboard_draws_metrics_and_progress():
    rich_console = pytest.importorskip("rich.console")
    from ember.train.renderer.dashboard import DashboardRenderer

    out = io.StringIO()
    console = rich_console.Console(file=out, force_terminal=True, width=100)
    training = (
        SupervisedTraining()
        .renderer(DashboardRenderer(console))
        .metric_train_numeric(LossMetric())
        .metric_valid_numeric(AccuracyMetric())
        .num_epochs(2)
        .summary()
    )
    train, valid = loaders(batch_size=8)
    training.launch(Learner(Classifier.new(Device.flex().autodiff()), AdamConfig().init(), 1e-2), train, valid)
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", out.getvalue())
    assert "Classifier" in text and "epoch 2/2" in text and "Learner Summary" in text
    assert "Accuracy" in text and "train" in text and "valid" in text


def test_default_renderer_follows_the_terminal(monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False, raising=False)
    assert isinstance(default_renderer(), PlainRenderer)
    pytest.importorskip("rich")
    from ember.train.renderer.dashboard import DashboardRenderer

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    assert isinstance(default_renderer(), DashboardRenderer)


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name == "nt", reason="POSIX signals")
def test_interrupter_first_sigint_stops_second_raises():
    interrupter = Interrupter()
    before = signal.getsignal(signal.SIGINT)
    with interrupter.catch_sigint():
        os.kill(os.getpid(), signal.SIGINT)
        assert interrupter.should_stop() and "Ctrl-C" in interrupter.reason
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before
    interrupter.reset()
    assert not interrupter.should_stop()
