"""``ember.optim``: optimizers, gradients by parameter id, clipping, schedulers."""

from ember.optim.adam import Adam, AdamConfig, AdamState, AdamWConfig
from ember.optim.base import OptimizerConfig, OptimizerState, SimpleOptimizer
from ember.optim.clipping import GradientClipping
from ember.optim.grads import GradientsAccumulator, GradientsParams
from ember.optim.module_optimizer import ModuleOptimizer

__all__ = [
    "Adam", "AdamConfig", "AdamState", "AdamWConfig", "GradientClipping", "GradientsAccumulator",
    "GradientsParams", "ModuleOptimizer", "OptimizerConfig", "OptimizerState", "SimpleOptimizer",
]
