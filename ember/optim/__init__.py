"""``ember.optim``: optimizers, gradients by parameter id, clipping, schedulers.

An optimizer is its config (``AdamConfig(...)``): ``init()`` gives the
:class:`ModuleOptimizer` that steps a model, ``model = optim.step(lr, model, grads)``.
"""

from ember.optim.adadelta import AdadeltaConfig, AdadeltaState
from ember.optim.adagrad import AdaGradConfig, AdaGradState
from ember.optim.adam import AdamConfig, AdamState, AdamWConfig
from ember.optim.adamax import AdamaxConfig, AdamaxState
from ember.optim.adan import AdanConfig, AdanState
from ember.optim.base import OptimizerConfig, OptimizerState
from ember.optim.clipping import GradientClipping
from ember.optim.grads import GradientsAccumulator, GradientsParams
from ember.optim.lamb import LambConfig, LambState
from ember.optim.lion import LionConfig, LionState
from ember.optim.module_optimizer import ModuleOptimizer
from ember.optim.muon import AdjustLrFn, MuonConfig, MuonState
from ember.optim.nadam import NAdamConfig, NAdamState
from ember.optim.radam import RAdamConfig, RAdamState
from ember.optim.rmsprop import RmsPropConfig, RmsPropState
from ember.optim.sgd import SgdConfig, SgdState

__all__ = [
    "AdaGradConfig",
    "AdaGradState",
    "AdadeltaConfig",
    "AdadeltaState",
    "AdamConfig",
    "AdamState",
    "AdamWConfig",
    "AdamaxConfig",
    "AdamaxState",
    "AdanConfig",
    "AdanState",
    "AdjustLrFn",
    "GradientClipping",
    "GradientsAccumulator",
    "GradientsParams",
    "LambConfig",
    "LambState",
    "LionConfig",
    "LionState",
    "ModuleOptimizer",
    "MuonConfig",
    "MuonState",
    "NAdamConfig",
    "NAdamState",
    "OptimizerConfig",
    "OptimizerState",
    "RAdamConfig",
    "RAdamState",
    "RmsPropConfig",
    "RmsPropState",
    "SgdConfig",
    "SgdState",
]
