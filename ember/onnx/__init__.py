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

__all__ = ["ModelDescription", "OnnxModel", "describe", "load", "supported_ops"]
