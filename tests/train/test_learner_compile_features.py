"""``Learner(..., compile=True)`` with the training features around the steps: a
compiled run resumed from a checkpoint follows the uninterrupted compiled run (and two
resumed runs are bit-identical); early stopping stops at the eager run's epoch; mixed precision compiles (bf16)
or runs the loss-scaled step eagerly after one warning (16-mixed, whose overflow
check reads a value), against the eager run as the oracle."""

from __future__ import annotations

import itertools
import shutil
import warnings

import numpy as np

from ember import Device
from ember.capture import CompileWarning
from ember.optim import AdamConfig, SgdConfig
from ember.optim.lr_scheduler import LinearLrSchedulerConfig
from ember.train import Learner, LossMetric, SupervisedTraining
from tests.train.models import Classifier, loaders, params


def fit(artifact_dir, compile: bool, epochs: int = 3, optim=None, lr=None, precision="32-true", stopping=None):
    device = Device.flex().autodiff()
    device.seed(0)
    training = (
        SupervisedTraining(artifact_dir)
        .renderer("none")
        .plots(False)
        .metric_train_numeric(LossMetric())
        .metric_valid_numeric(LossMetric())
        .num_epochs(epochs)
    )
    if stopping is not None:
        training = training.early_stopping(LossMetric(), **stopping)
    scheduler = lr if lr is not None else LinearLrSchedulerConfig(2e-2, 1e-3, 20).init()
    learner = Learner(
        Classifier.new(device), optim or AdamConfig().init(), scheduler, precision=precision, compile=compile
    )
    train, valid = loaders(batch_size=8)  # 72 training items: 9 batches; 24 validation items: 3
    return training.launch(learner, train, valid), learner


def losses(result, split: str) -> list[float]:
    """The epoch values of the loss on ``split``, by epoch."""
    series = result.history.to_dict()[split]["Loss"]
    return [series[epoch] for epoch in sorted(series, key=int)]


def test_a_resumed_compiled_run_follows_the_uninterrupted_one(tmp_path):
    """Resumed from the checkpoint of epoch 2, a compiled run ends bit-identical to the
    uninterrupted compiled run: a step traced while the optimizer has states (the
    resumed run's first) is compiled from its first call, as that step was in the
    uninterrupted run. Two runs resumed from the same checkpoint are bit-identical."""
    whole, _ = fit(tmp_path / "whole", True, epochs=3)
    first, _ = fit(tmp_path / "resumed", True, epochs=2)
    assert first.epochs == 2 and not first.interrupted
    shutil.copytree(tmp_path / "resumed", tmp_path / "again")
    # A new process would start here: new compiled functions, traced again from the
    # checkpoint's model and optimizer state.
    resumed, learner = fit(tmp_path / "resumed", True, epochs=3)
    again, _ = fit(tmp_path / "again", True, epochs=3)
    assert resumed.epochs == again.epochs == 3 and not resumed.interrupted
    for key, value in params(whole.model).items():
        np.testing.assert_array_equal(params(resumed.model)[key], value, err_msg=key)
        np.testing.assert_array_equal(params(again.model)[key], params(resumed.model)[key], err_msg=key)
    for split in ("train", "valid"):
        assert losses(resumed, split) == losses(whole, split)
    assert again.history.to_dict() == resumed.history.to_dict()
    assert learner.compiled.stats()["update"]["replays"] > 0


def test_compiled_early_stopping_stops_at_the_eager_epoch(tmp_path):
    stopping = {"patience": 1, "min_delta": 0.02}
    eager, _ = fit(tmp_path / "eager", False, epochs=10, optim=SgdConfig().init(), lr=5e-2, stopping=stopping)
    compiled, learner = fit(
        tmp_path / "compiled", True, epochs=10, optim=SgdConfig().init(), lr=5e-2, stopping=stopping
    )
    assert eager.stopped_early and compiled.stopped_early
    assert compiled.epochs == eager.epochs < 10
    valid = losses(eager, "valid")
    # The decision is not a near tie: no epoch's improvement lies within 1e-4 of
    # min_delta, far beyond the compiled losses' 1e-5 relative difference.
    assert min(abs((a - b) - stopping["min_delta"]) for a, b in itertools.pairwise(valid)) > 1e-4
    np.testing.assert_allclose(losses(compiled, "valid"), valid, rtol=1e-5)
    assert learner.compiled.stats()["update"]["eager"] == 0


def test_bf16_mixed_compiles_and_follows_the_eager_run(tmp_path):
    eager, _ = fit(tmp_path / "eager", False, epochs=2, precision="bf16-mixed")
    compiled, learner = fit(tmp_path / "compiled", True, epochs=2, precision="bf16-mixed")
    stats = learner.compiled.stats()
    assert stats["update"]["eager"] == 0 and stats["update"]["replays"] > 0
    np.testing.assert_allclose(losses(compiled, "train"), losses(eager, "train"), rtol=1e-5)
    np.testing.assert_allclose(losses(compiled, "valid"), losses(eager, "valid"), rtol=1e-5)
    for _, p in compiled.model.named_params():
        assert p.dtype.value == "float32"  # float32 master weights


def test_16_mixed_runs_the_scaled_step_eagerly_after_one_warning(tmp_path):
    eager, eager_learner = fit(tmp_path / "eager", False, epochs=2, precision="16-mixed")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled, learner = fit(tmp_path / "compiled", True, epochs=2, precision="16-mixed")
    compile_warnings = [w for w in caught if issubclass(w.category, CompileWarning)]
    assert len(compile_warnings) >= 1
    stats = learner.compiled.stats()
    assert stats["update"]["eager"] > 0  # the overflow check reads a value: eager from then on
    np.testing.assert_allclose(losses(compiled, "train"), losses(eager, "train"), rtol=1e-5)
    assert learner.grad_scaler.state_dict() == eager_learner.grad_scaler.state_dict()
