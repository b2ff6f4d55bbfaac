"""The ONNX operators ember implements, registered in :mod:`ember.onnx.ops.registry`
by the modules below (one family each)."""

from ember.onnx.ops import (
    activation,
    attention,
    control,
    crop,
    detection,
    elementwise,
    indexing,
    layout,
    loss,
    nn,
    norm,
    recurrent,
    reduce,
    resize,
    select,
    sequence,
    signal,
)
from ember.onnx.ops.registry import OPS, Node, OpDef, lookup, supported_ops

__all__ = [
    "OPS",
    "Node",
    "OpDef",
    "activation",
    "attention",
    "control",
    "crop",
    "detection",
    "elementwise",
    "indexing",
    "layout",
    "loss",
    "lookup",
    "nn",
    "norm",
    "recurrent",
    "reduce",
    "resize",
    "select",
    "sequence",
    "signal",
    "supported_ops",
]
