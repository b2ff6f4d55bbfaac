"""Learning-rate schedulers (Burn's ``lr_scheduler``): ``XxxConfig(...).init()``
returns a scheduler whose ``step()`` gives the next learning rate."""

from ember.optim.lr_scheduler.base import LrScheduler, LrSchedulerConfig
from ember.optim.lr_scheduler.composed import ComposedLrScheduler, ComposedLrSchedulerConfig, SchedulerReduction
from ember.optim.lr_scheduler.constant import ConstantLr, ConstantLrSchedulerConfig
from ember.optim.lr_scheduler.cosine import CosineAnnealingLrScheduler, CosineAnnealingLrSchedulerConfig
from ember.optim.lr_scheduler.exponential import ExponentialLrScheduler, ExponentialLrSchedulerConfig
from ember.optim.lr_scheduler.linear import LinearLrScheduler, LinearLrSchedulerConfig
from ember.optim.lr_scheduler.noam import NoamLrScheduler, NoamLrSchedulerConfig
from ember.optim.lr_scheduler.sequential import SequentialLrScheduler, SequentialLrSchedulerConfig
from ember.optim.lr_scheduler.step import StepLrScheduler, StepLrSchedulerConfig
from ember.optim.lr_scheduler.warmup import WarmupLrSchedulerConfig

__all__ = [
    "ComposedLrScheduler",
    "ComposedLrSchedulerConfig",
    "ConstantLr",
    "ConstantLrSchedulerConfig",
    "CosineAnnealingLrScheduler",
    "CosineAnnealingLrSchedulerConfig",
    "ExponentialLrScheduler",
    "ExponentialLrSchedulerConfig",
    "LinearLrScheduler",
    "LinearLrSchedulerConfig",
    "LrScheduler",
    "LrSchedulerConfig",
    "NoamLrScheduler",
    "NoamLrSchedulerConfig",
    "SchedulerReduction",
    "SequentialLrScheduler",
    "SequentialLrSchedulerConfig",
    "StepLrScheduler",
    "StepLrSchedulerConfig",
    "WarmupLrSchedulerConfig",
]
