"""Checkpoints of a training run and the strategies that decide which to keep."""

from ember.train.checkpoint.checkpointer import CheckpointPosition, FileCheckpointer
from ember.train.checkpoint.strategy import (
    CheckpointingStrategy,
    ComposedCheckpointingStrategy,
    KeepLastNCheckpoints,
    MetricCheckpointingStrategy,
)

__all__ = [
    "CheckpointPosition",
    "CheckpointingStrategy",
    "ComposedCheckpointingStrategy",
    "FileCheckpointer",
    "KeepLastNCheckpoints",
    "MetricCheckpointingStrategy",
]
