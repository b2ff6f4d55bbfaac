"""``ember.train``: the Learner and what surrounds the training loop (Burn's
``burn-train``): metrics, checkpoints and resuming, early stopping, a terminal
dashboard, metric logs and plots.

>>> training = (SupervisedTraining("runs/mlp")                      # doctest: +SKIP
...     .metric_train_numeric(LossMetric()).metric_valid_numeric(LossMetric())
...     .metric_valid_numeric(AccuracyMetric()).num_epochs(10).summary())
>>> model, summary = training.launch(Learner(model, AdamConfig().init(), 1e-3), train, valid)  # doctest: +SKIP
"""

from ember.train.checkpoint import (
    CheckpointingStrategy,
    CheckpointPosition,
    ComposedCheckpointingStrategy,
    FileCheckpointer,
    KeepLastNCheckpoints,
    MetricCheckpointingStrategy,
)
from ember.train.early_stopping import EarlyStoppingStrategy, MetricEarlyStoppingStrategy
from ember.train.history import MetricHistory
from ember.train.interrupter import Interrupter
from ember.train.learner import Learner
from ember.train.logger import FileMetricLogger
from ember.train.metric import (
    AccuracyMetric,
    AurocMetric,
    ClassReduction,
    CpuMemory,
    Direction,
    FBetaScoreMetric,
    IterationSpeedMetric,
    LearningRateMetric,
    LossMetric,
    Metric,
    PrecisionMetric,
    RecallMetric,
    Split,
    TopKAccuracyMetric,
)
from ember.train.output import ClassificationOutput, MultiLabelClassificationOutput, RegressionOutput, TrainOutput
from ember.train.parallel import SingleDevice
from ember.train.renderer import EpochReport, MetricsRenderer, PlainRenderer, TrainingInfo, TrainingProgress
from ember.train.result import TrainingResult
from ember.train.state import TrainingState
from ember.train.step import TrainStep, ValidStep
from ember.train.summary import LearnerSummary
from ember.train.tensorboard import TensorBoardLogger
from ember.train.training import SupervisedTraining

__all__ = [
    "AccuracyMetric",
    "AurocMetric",
    "CheckpointPosition",
    "CheckpointingStrategy",
    "ClassReduction",
    "ClassificationOutput",
    "ComposedCheckpointingStrategy",
    "CpuMemory",
    "Direction",
    "EarlyStoppingStrategy",
    "EpochReport",
    "FBetaScoreMetric",
    "FileCheckpointer",
    "FileMetricLogger",
    "TensorBoardLogger",
    "Interrupter",
    "IterationSpeedMetric",
    "KeepLastNCheckpoints",
    "Learner",
    "LearnerSummary",
    "LearningRateMetric",
    "LossMetric",
    "Metric",
    "MetricCheckpointingStrategy",
    "MetricEarlyStoppingStrategy",
    "MetricHistory",
    "MetricsRenderer",
    "MultiLabelClassificationOutput",
    "PlainRenderer",
    "PrecisionMetric",
    "RecallMetric",
    "RegressionOutput",
    "SingleDevice",
    "Split",
    "SupervisedTraining",
    "TopKAccuracyMetric",
    "TrainOutput",
    "TrainStep",
    "TrainingInfo",
    "TrainingProgress",
    "TrainingResult",
    "TrainingState",
    "ValidStep",
]
