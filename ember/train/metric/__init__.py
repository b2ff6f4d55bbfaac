"""Training metrics (Burn's ``burn-train::metric``). Each reads the item a step
returns; classification metrics are in percent, as in Burn."""

from ember.train.metric.accuracy import AccuracyMetric, TopKAccuracyMetric
from ember.train.metric.auroc import AurocMetric
from ember.train.metric.base import (
    Direction,
    ItemView,
    Metric,
    MetricEntry,
    MetricMetadata,
    NumericMetricState,
    Split,
)
from ember.train.metric.confusion import ClassReduction
from ember.train.metric.cpu_memory import CpuMemory
from ember.train.metric.fscore import FBetaScoreMetric
from ember.train.metric.iteration_speed import IterationSpeedMetric
from ember.train.metric.learning_rate import LearningRateMetric
from ember.train.metric.loss import LossMetric
from ember.train.metric.precision import PrecisionMetric
from ember.train.metric.recall import RecallMetric

__all__ = [
    "AccuracyMetric",
    "AurocMetric",
    "ClassReduction",
    "CpuMemory",
    "Direction",
    "FBetaScoreMetric",
    "ItemView",
    "IterationSpeedMetric",
    "LearningRateMetric",
    "LossMetric",
    "Metric",
    "MetricEntry",
    "MetricMetadata",
    "NumericMetricState",
    "PrecisionMetric",
    "RecallMetric",
    "Split",
    "TopKAccuracyMetric",
]
