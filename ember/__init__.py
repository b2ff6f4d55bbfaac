"""ember: a deep learning framework for Python with the architecture of Burn.

>>> from ember import Device, Tensor
>>> x = Tensor.from_floats([[1.0, 2.0]], device=Device.flex())
>>> x.add_scalar(1.0).tolist()
[[2.0, 3.0]]
"""

from ember import autograd, fft, linalg
from ember.backend.autodiff import Checkpointing, Gradients
from ember.backend.dtype import DType
from ember.capture import compile
from ember.device import Device, DeviceKind
from ember.module import Config, Module, Param, ParamId
from ember.tensor import Distribution, Shape, Tensor, TensorData
from ember.tensor.autocast import autocast
from ember.tensor.ops.complex import complex, polar, view_as_complex, view_as_real
from ember.tensor.stft import istft, stft
from ember.tensor.windows import blackman_window, hamming_window, hann_window, kaiser_window

float64 = DType.FLOAT64
float32 = DType.FLOAT32
float16 = DType.FLOAT16
bfloat16 = DType.BFLOAT16
int64 = DType.INT64
int32 = DType.INT32
uint8 = DType.UINT8
int8 = DType.INT8
uint64 = DType.UINT64
bool_ = DType.BOOL
complex64 = DType.COMPLEX64
complex128 = DType.COMPLEX128

__version__ = "0.1.0"


def __getattr__(name: str):
    # ``ember.onnx`` is imported on first use (it reads models with the optional onnx package).
    if name == "onnx":
        import importlib

        return importlib.import_module("ember.onnx")
    raise AttributeError(f"module 'ember' has no attribute {name!r}")


__all__ = [
    "Checkpointing",
    "Config",
    "DType",
    "Device",
    "DeviceKind",
    "Distribution",
    "Gradients",
    "Module",
    "Param",
    "ParamId",
    "Shape",
    "Tensor",
    "TensorData",
    "autocast",
    "autograd",
    "blackman_window",
    "compile",
    "complex",
    "fft",
    "hamming_window",
    "hann_window",
    "istft",
    "kaiser_window",
    "linalg",
    "polar",
    "stft",
    "view_as_complex",
    "view_as_real",
]
