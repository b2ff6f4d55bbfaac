"""Metrics against sklearn.metrics on whole epochs fed in uneven batches."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import ConfigError, ShapeError
from ember.train import ClassificationOutput, MultiLabelClassificationOutput
from ember.train.metric import (
    AccuracyMetric,
    AurocMetric,
    ClassReduction,
    CpuMemory,
    FBetaScoreMetric,
    ItemView,
    IterationSpeedMetric,
    LearningRateMetric,
    LossMetric,
    MetricMetadata,
    PrecisionMetric,
    RecallMetric,
    Split,
    TopKAccuracyMetric,
)

skm = pytest.importorskip("sklearn.metrics")
BATCHES = [7, 1, 16, 5, 11]  # uneven on purpose: epoch values must weight by batch size


def meta(batch_size, lr=None):
    return MetricMetadata(Split.TRAIN, 1, 1, 1, 1, batch_size, 0, 0, lr)


def feed(metric, outputs, targets, output_type=ClassificationOutput, loss=None):
    device = Device.flex()
    start = 0
    for n in BATCHES:
        sl = slice(start, start + n)
        start += n
        loss_value = Tensor.from_floats([0.0 if loss is None else float(loss[sl].mean())], device=device)
        item = output_type(
            loss_value, Tensor.from_data(outputs[sl], device=device), Tensor.from_data(targets[sl], device=device)
        )
        metric.update(ItemView(item), meta(n))
    return metric.value()


@pytest.fixture
def multiclass():
    rng = np.random.default_rng(0)
    n, c = sum(BATCHES), 5
    targets = rng.integers(0, c, n)
    logits = rng.normal(size=(n, c)).astype(np.float32)
    logits[np.arange(n), targets] += 1.0  # better than chance, not perfect
    logits[:, 4] -= 10.0  # class 4 is never predicted: its precision is undefined
    return logits, targets


def test_loss_is_weighted_by_batch_size():
    per_sample = np.random.default_rng(1).random(sum(BATCHES))
    value = feed(
        LossMetric(), np.zeros((sum(BATCHES), 2), np.float32), np.zeros(sum(BATCHES), np.int64), loss=per_sample
    )
    assert value == pytest.approx(per_sample.mean(), rel=1e-6)
    unweighted = np.mean([per_sample[s : s + n].mean() for s, n in zip(np.cumsum([0] + BATCHES[:-1]), BATCHES)])
    assert abs(unweighted - per_sample.mean()) > 1e-3  # the test would catch an unweighted mean


def test_accuracy(multiclass):
    logits, targets = multiclass
    assert feed(AccuracyMetric(), logits, targets) == pytest.approx(100 * skm.accuracy_score(targets, logits.argmax(1)))


def test_accuracy_pad_token(multiclass):
    logits, targets = multiclass
    keep = targets != 2
    expected = 100 * skm.accuracy_score(targets[keep], logits[keep].argmax(1))
    assert feed(AccuracyMetric(pad_token=2), logits, targets) == pytest.approx(expected)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_top_k_accuracy(multiclass, k):
    logits, targets = multiclass
    expected = 100 * skm.top_k_accuracy_score(targets, logits, k=k, labels=np.arange(5))
    metric = TopKAccuracyMetric(k)
    assert feed(metric, logits, targets) == pytest.approx(expected) and metric.name == f"Top-{k} Accuracy"


@pytest.mark.parametrize("reduction", [ClassReduction.MACRO, ClassReduction.MICRO])
@pytest.mark.parametrize(
    ("cls", "sk"),
    [(PrecisionMetric, "precision_score"), (RecallMetric, "recall_score"), (FBetaScoreMetric, "f1_score")],
)
def test_multiclass_confusion_metrics(multiclass, reduction, cls, sk):
    logits, targets = multiclass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = 100 * getattr(skm, sk)(targets, logits.argmax(1), average=reduction.value, zero_division=np.nan)
    metric = cls.multiclass().with_class_reduction(reduction)
    assert feed(metric, logits, targets) == pytest.approx(expected)


@pytest.mark.parametrize("beta", [0.5, 2.0])
def test_fbeta(multiclass, beta):
    logits, targets = multiclass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = 100 * skm.fbeta_score(targets, logits.argmax(1), beta=beta, average="macro", zero_division=np.nan)
    assert feed(FBetaScoreMetric.multiclass(beta=beta), logits, targets) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("cls", "sk"),
    [(PrecisionMetric, "precision_score"), (RecallMetric, "recall_score"), (FBetaScoreMetric, "f1_score")],
)
@pytest.mark.parametrize("columns", [1, 2])
def test_binary_confusion_metrics(cls, sk, columns):
    rng = np.random.default_rng(2)
    n = sum(BATCHES)
    targets = rng.integers(0, 2, n)
    logit = rng.normal(size=n) + 1.2 * (targets - 0.5)
    output = logit[:, None] if columns == 1 else np.stack([np.zeros(n), logit], 1)
    probs = 1 / (1 + np.exp(-logit))
    expected = 100 * getattr(skm, sk)(targets, probs >= 0.7)
    assert feed(cls.binary(threshold=0.7), output.astype(np.float32), targets) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("reduction", [ClassReduction.MACRO, ClassReduction.MICRO])
def test_multilabel_precision_recall(reduction):
    rng = np.random.default_rng(3)
    n = sum(BATCHES)
    targets = rng.integers(0, 2, (n, 4))
    logits = rng.normal(size=(n, 4)) + 1.5 * (targets - 0.5)
    pred = logits >= 0.0
    for cls, sk in ((PrecisionMetric, "precision_score"), (RecallMetric, "recall_score")):
        expected = 100 * getattr(skm, sk)(targets, pred, average=reduction.value, zero_division=np.nan)
        metric = cls.multilabel(threshold=0.5).with_class_reduction(reduction)
        got = feed(metric, logits.astype(np.float32), targets, output_type=MultiLabelClassificationOutput)
        assert got == pytest.approx(expected)


def test_multiclass_top2_precision_counts():
    """Burn's reference case: with top-2, micro precision is hits / (2 * samples)."""
    logits = np.array([[0.2, 0.8, 0.0], [1.0, 0.0, 0.0], [0.3, 0.6, 0.2], [0.1, 0.2, 0.7], [0.9, 0.1, 0.0]], np.float32)
    targets = np.array([2, 0, 1, 1, 0])
    metric = PrecisionMetric.multiclass(top_k=2).with_class_reduction(ClassReduction.MICRO)
    metric.update(ItemView(ClassificationOutput(None, Tensor.from_data(logits), Tensor.from_data(targets))), meta(5))
    # top-2 sets: {1,0} {0,1|2} {1,0} {2,1} {0,1}: the target is in 4 of them
    assert metric.value() == pytest.approx(100 * 4 / 10)


def test_auroc_binary():
    rng = np.random.default_rng(4)
    n = sum(BATCHES)
    targets = rng.integers(0, 2, n)
    scores = np.round(rng.normal(size=n) + targets, 1)  # rounded: ties happen
    two = np.stack([np.zeros(n), scores], 1).astype(np.float64)
    expected = 100 * skm.roc_auc_score(targets, scores)
    assert feed(AurocMetric(), two, targets) == pytest.approx(expected)
    assert feed(AurocMetric(), scores[:, None], targets) == pytest.approx(expected)


def test_auroc_multiclass_ovr(multiclass):
    logits, targets = multiclass
    e = np.exp(logits - logits.max(1, keepdims=True))
    probs = e / e.sum(1, keepdims=True)
    expected = 100 * skm.roc_auc_score(targets, probs, multi_class="ovr", average="macro")
    assert feed(AurocMetric(multiclass=True), logits.astype(np.float64), targets) == pytest.approx(expected, rel=1e-6)


def test_auroc_undefined_for_one_class():
    metric = AurocMetric()
    item = ClassificationOutput(None, Tensor.from_floats([[0.1], [0.9]]), Tensor.from_ints([1, 1]))
    assert math.isnan(metric.update(ItemView(item), meta(2))) and math.isnan(metric.value())
    assert metric.format(metric.value()) == "n/a"


def test_state_round_trip_resumes_an_epoch(multiclass):
    logits, targets = multiclass
    for make in (
        AccuracyMetric,
        lambda: PrecisionMetric.multiclass(),
        lambda: AurocMetric(multiclass=True),
        LossMetric,
    ):
        whole = make()
        expected = feed(whole, logits.astype(np.float64), targets, loss=np.arange(len(targets), dtype=float))
        first, second = make(), make()
        half = ClassificationOutput(
            Tensor.from_floats([1.0]), Tensor.from_data(logits[:20].astype(np.float64)), Tensor.from_data(targets[:20])
        )
        rest = ClassificationOutput(
            Tensor.from_floats([2.0]), Tensor.from_data(logits[20:].astype(np.float64)), Tensor.from_data(targets[20:])
        )
        first.update(ItemView(half), meta(20))
        second.load_state_dict(first.state_dict())
        second.update(ItemView(rest), meta(len(targets) - 20))
        first.update(ItemView(rest), meta(len(targets) - 20))
        assert second.value() == pytest.approx(first.value())
        if not isinstance(whole, LossMetric):
            assert second.value() == pytest.approx(expected)


def test_learning_rate_speed_memory():
    lr = LearningRateMetric()
    for value in (0.1, 0.2, 0.3):
        lr.update(ItemView(None), meta(4, lr=value))
    assert lr.value() == pytest.approx(0.2) and lr.train_only
    speed = IterationSpeedMetric()
    assert speed.update(ItemView(None), meta(4)) > 0
    memory = CpuMemory()
    assert 1 < memory.update(ItemView(None), meta(4)) < 1e7


def test_metric_errors(multiclass):
    logits, targets = multiclass
    with pytest.raises(ShapeError, match=r"AccuracyMetric|Accuracy: output \[3, 5\] and targets \[4\]"):
        AccuracyMetric().update(
            ItemView(ClassificationOutput(None, Tensor.from_data(logits[:3]), Tensor.from_data(targets[:4]))), meta(3)
        )
    with pytest.raises(ConfigError, match="has no 'targets'"):
        AccuracyMetric().update(ItemView({"loss": 1.0, "output": logits}), meta(3))
    with pytest.raises(ShapeError, match="must hold one value"):
        LossMetric().update(ItemView({"loss": np.ones(3)}), meta(3))
    with pytest.raises(ConfigError, match="k must be an int >= 1"):
        TopKAccuracyMetric(0)
    with pytest.raises(ConfigError, match="threshold must lie in"):
        PrecisionMetric.binary(threshold=2.0)
    with pytest.raises(ShapeError, match="binary metric needs output"):
        PrecisionMetric.binary().update(ItemView(ClassificationOutput(None, logits, targets)), meta(3))
    with pytest.raises(ConfigError, match="beta must be > 0"):
        FBetaScoreMetric(beta=0)
