"""``Learner(compile="auto")``, the default: the steps compile on flex, a step whose
trace shows Python side effects runs eagerly after one warning (and its effects then
happen once per batch, as written), other devices run eagerly; and the audit itself
(:func:`ember.train.side_effects.audited`) on each kind of effect and on code that has
none."""

from __future__ import annotations

import dataclasses
import random
import time
import warnings

import numpy as np
import pytest

from ember import Device
from ember.capture import CompileWarning
from ember.optim import AdamConfig
from ember.train import Learner, LossMetric, SupervisedTraining
from ember.train.side_effects import audited
from tests.conftest import make_device
from tests.train.models import Classifier, loaders, params

COUNTER = 0


def pure(values):
    out = []
    for v in values:
        out.append(v * 2)  # a list built here: not an effect
    return sum(x for x in out)  # a generator expression started here: not an effect


@dataclasses.dataclass
class Point:
    x: float


class Holder:
    def __init__(self, value):
        self.value = value  # a constructor's attribute: not an effect

    def bump(self):
        self.value += 1


def writes_global():
    global COUNTER
    COUNTER += 1


def make_nonlocal_writer():
    count = 0

    def step():
        nonlocal count
        count += 1

    return step


def numbers():
    yield 1
    yield 2


OUTSIDE = numbers()
next(OUTSIDE)


@pytest.mark.parametrize(
    "fn, effect",
    [
        (writes_global, "writes the global 'COUNTER'"),
        (make_nonlocal_writer(), "writes 'count' of an enclosing function"),
        (Holder(1).bump, "sets the attribute 'value'"),
        (lambda: print("x", end="\r"), "calls print()"),
        (lambda: time.sleep(0), "calls time.sleep()"),
        (lambda: time.perf_counter(), "calls time.perf_counter()"),
        (lambda: random.random(), "draws from Python's random module"),
        (lambda: np.random.rand(), "draws from numpy's global random generator"),
        (lambda: next(OUTSIDE, None), "calls next()"),
        (lambda: list(OUTSIDE), "numbers (test_side_effects.py) is a generator created outside the step"),
    ],
    ids=["global", "nonlocal", "attribute", "print", "sleep", "clock", "random", "numpy-random", "next", "generator"],
)
def test_the_audit_names_each_kind_of_side_effect(fn, effect, capsys):
    _, effects = audited(fn)
    assert any(effect in e for e in effects), effects


def test_the_audit_finds_nothing_in_code_without_side_effects():
    def step(values):
        Holder(3)  # a new object's constructor
        Point(1.0)  # a dataclass's generated __init__
        fresh = numbers()  # a generator started here
        return pure(values) + sum(fresh)

    result, effects = audited(step, [1, 2, 3])
    assert result == 15 and effects == []


def test_the_audit_restores_the_profiler_and_passes_errors_through():
    import sys

    def fail():
        raise ValueError("boom")

    before = sys.getprofile()
    with pytest.raises(ValueError, match="boom"):
        audited(fail)
    assert sys.getprofile() is before


def fit(tmp_path, compile="auto", train_step=None, device=None, epochs=2):
    device = device or Device.flex().autodiff()
    device.seed(0)
    training = (
        SupervisedTraining(tmp_path)
        .renderer("none")
        .plots(False)
        .metric_train_numeric(LossMetric())
        .metric_valid_numeric(LossMetric())
        .num_epochs(epochs)
    )
    learner = Learner(Classifier.new(device), AdamConfig().init(), 1e-2, train_step=train_step, compile=compile)
    train, valid = loaders(batch_size=8)  # 72 training items: 9 batches; 24 validation items: 3
    return training.launch(learner, train, valid), learner


def test_the_default_compiles_a_clean_step_on_flex(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        result, learner = fit(tmp_path / "auto")
    stats = learner.compiled.stats()
    assert learner.compiled.auto and learner.compiled.eager == {}
    assert stats["update"]["replays"] >= 14 and stats["valid"]["replays"] >= 4  # 2 epochs of 9 and 3 batches
    explicit, _ = fit(tmp_path / "true", compile=True)
    for key, value in params(explicit.model).items():  # the same compiled steps as compile=True
        np.testing.assert_array_equal(params(result.model)[key], value, err_msg=key)
    assert "compile=" not in repr(learner)


def test_a_step_with_a_side_effect_runs_eagerly_after_one_warning(tmp_path):
    class Counting:
        def __init__(self):
            self.count = 0

        def __call__(self, model, batch):
            self.count += 1
            return model.forward_classification(batch)

    counting = Counting()
    with pytest.warns(
        CompileWarning, match=r"training step runs eagerly.*Counting.__call__.*sets the attribute 'count'"
    ):
        result, learner = fit(tmp_path / "counted", train_step=counting)
    assert counting.count == 18  # every batch of both epochs ran the Python: 2 x 9
    assert "count" in learner.compiled.eager["train"] and "valid" not in learner.compiled.eager
    assert learner.compiled.stats()["valid"]["replays"] > 0  # the validation step still compiles
    eager, _ = fit(tmp_path / "eager", compile=False, train_step=Counting())
    for key, value in params(eager.model).items():
        np.testing.assert_allclose(params(result.model)[key], value, rtol=1e-5, atol=1e-7, err_msg=key)


def test_other_devices_run_eagerly_without_a_warning(tmp_path):
    device = make_device("cube+autodiff")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        _, learner = fit(tmp_path, device=device, epochs=1)
    assert "not a flex" in learner.compiled.eager["train"]
    assert learner.compiled.stats()["update"]["calls"] == 0
