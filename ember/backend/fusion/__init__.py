"""``fusion``: the kernel IR, lazy fusion as a backend decorator, and its executors.

See :mod:`ember.backend.fusion.graph` for the IR,
:mod:`ember.backend.fusion.backend` for ``Device.fusion()``,
:mod:`ember.backend.fusion.scheduler` (over :mod:`~ember.backend.kernel.exprs`,
:mod:`~ember.backend.fusion.steps` and :mod:`~ember.backend.kernel.views`) and
:mod:`ember.backend.fusion.memory` for the target-independent fusion analysis,
:mod:`ember.backend.fusion.llvm` for the CPU lowering and
:mod:`ember.backend.fusion.wgsl` for the cube (wgpu) lowering.
"""

from ember.backend.fusion.backend import FusionBackend, LazyTensor
from ember.backend.fusion.executors import ReplayExecutor, default_executor
from ember.backend.fusion.graph import Aval, Graph, Node, Ref

__all__ = ["Aval", "FusionBackend", "Graph", "LazyTensor", "Node", "Ref", "ReplayExecutor", "default_executor"]
