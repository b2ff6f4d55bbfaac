"""Window functions: HannWindow, HammingWindow, BlackmanWindow (opset 17). Their one input
is the window's length, read on the host; the window is a host value (a constant when the
length is)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.onnx.dtypes import numpy_dtype
from ember.onnx.ops.common import scalar
from ember.onnx.ops.registry import Node, numpy_op, op


def _hann(n: np.ndarray, length: int) -> np.ndarray:
    return np.sin(n * np.pi / length) ** 2


def _hamming(n: np.ndarray, length: int) -> np.ndarray:
    alpha = 25.0 / 46.0
    return alpha - (1 - alpha) * np.cos(2 * np.pi * n / length)


def _blackman(n: np.ndarray, length: int) -> np.ndarray:
    return 0.42 - 0.5 * np.cos(2 * np.pi * n / length) + 0.08 * np.cos(4 * np.pi * n / length)


_WINDOWS = {"HannWindow": _hann, "HammingWindow": _hamming, "BlackmanWindow": _blackman}


def _window_builder(node: Node) -> Callable[..., Any]:
    shape = _WINDOWS[node.op_type]
    periodic = bool(node.attr("periodic", 1))
    dtype = numpy_dtype(int(node.attr("output_datatype", 1)), node.label)

    def run(size: Any) -> np.ndarray:
        n = int(scalar(size))
        length = n if periodic else n - 1
        return shape(np.arange(n, dtype=np.float64), max(length, 1)).astype(dtype)

    return run


for _name in _WINDOWS:
    op(_name, host=(0,), since=17)(_window_builder)
    numpy_op(_name)(_window_builder)
