"""``ember.optim``: optimizers, gradients by parameter id, clipping, schedulers."""

from ember.optim.adagrad import AdaGrad, AdaGradConfig, AdaGradState
from ember.optim.adam import Adam, AdamConfig, AdamState, AdamWConfig
from ember.optim.adan import Adan, AdanConfig, AdanState
from ember.optim.base import OptimizerConfig, OptimizerState, SimpleOptimizer
from ember.optim.clipping import GradientClipping
from ember.optim.grads import GradientsAccumulator, GradientsParams
from ember.optim.module_optimizer import ModuleOptimizer
from ember.optim.muon import AdjustLrFn, Muon, MuonConfig, MuonState
from ember.optim.rmsprop import RmsProp, RmsPropConfig, RmsPropState
from ember.optim.sgd import Sgd, SgdConfig, SgdState

__all__ = [
    "Adam", "AdamConfig", "AdamState", "AdamWConfig", "GradientClipping", "GradientsAccumulator",
    "GradientsParams", "ModuleOptimizer", "OptimizerConfig", "OptimizerState", "SimpleOptimizer",
    "AdaGrad", "AdaGradConfig", "AdaGradState", "Adan", "AdanConfig", "AdanState", "AdjustLrFn", "Muon",
    "MuonConfig", "MuonState", "RmsProp", "RmsPropConfig", "RmsPropState", "Sgd", "SgdConfig", "SgdState",
]
