"""``ember.module``: modules, parameters, configs, traversal and records."""

from ember.module.config import Config
from ember.module.group import ParamGroup
from ember.module.module import Module
from ember.module.param import Param, ParamId, RunningState
from ember.module.visitor import ModuleMapper, ModuleVisitor

__all__ = ["Config", "Module", "ModuleMapper", "ModuleVisitor", "Param", "ParamGroup", "ParamId", "RunningState"]
