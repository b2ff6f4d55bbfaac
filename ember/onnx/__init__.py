"""``ember.onnx``: import ONNX models as ember modules.

>>> import ember.onnx                                          # doctest: +SKIP
>>> model = ember.onnx.load("resnet.onnx", Device.flex().autodiff())  # doctest: +SKIP
>>> print(ember.onnx.describe("resnet.onnx"))  # ops, opsets, shapes  # doctest: +SKIP

Reading needs the ``onnx`` package (``pip install 'ember[onnx]'``), which parses and
checks the file; the graph runs on ember's own ops.
"""

from ember.onnx.describe import ModelDescription, describe
from ember.onnx.load import load
from ember.onnx.model import OnnxModel
from ember.onnx.ops import supported_ops
from ember.onnx.trainable import InitializerInfo, InitializerRole, ParamsDescription

__all__ = [
    "InitializerInfo",
    "InitializerRole",
    "ModelDescription",
    "OnnxModel",
    "ParamsDescription",
    "describe",
    "load",
    "supported_ops",
]
