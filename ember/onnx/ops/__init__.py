"""The ONNX operators ember implements, registered in :mod:`ember.onnx.ops.registry`
by the modules below (one family each)."""

from ember.onnx.ops import activation, elementwise, indexing, layout, nn, norm, recurrent, reduce, resize, select
from ember.onnx.ops.registry import OPS, Node, OpDef, lookup, supported_ops

__all__ = [
    "OPS",
    "Node",
    "OpDef",
    "activation",
    "elementwise",
    "indexing",
    "layout",
    "lookup",
    "nn",
    "norm",
    "recurrent",
    "reduce",
    "resize",
    "select",
    "supported_ops",
]
