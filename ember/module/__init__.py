"""``ember.module``: modules, parameters, configs, traversal and records."""

from ember.module.config import Config
from ember.module.foreign import load_safetensors
from ember.module.group import ParamGroup
from ember.module.module import Module
from ember.module.param import Param, ParamId, RunningState
from ember.module.pytorch import load_pytorch
from ember.module.visitor import ModuleMapper, ModuleVisitor
from ember.module.weight_map import Rename, Split, WeightMap

__all__ = [
    "Config",
    "Module",
    "ModuleMapper",
    "ModuleVisitor",
    "Param",
    "ParamGroup",
    "ParamId",
    "Rename",
    "RunningState",
    "Split",
    "WeightMap",
    "load_pytorch",
    "load_safetensors",
]
