"""``fusion``: the kernel IR, lazy fusion as a backend decorator, and its executors.

See :mod:`ember.backend.fusion.graph` for the IR and
:mod:`ember.backend.fusion.backend` for ``Device.fusion()``.
"""

from ember.backend.fusion.backend import FusionBackend, LazyTensor
from ember.backend.fusion.graph import Aval, Graph, Node, Ref

__all__ = ["Aval", "FusionBackend", "Graph", "LazyTensor", "Node", "Ref"]
