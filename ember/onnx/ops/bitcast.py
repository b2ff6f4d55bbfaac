"""BitCast (opset 26): the input's bits read as another type of the same width.

ember's tensors have no bit reinterpretation, so the values are read back to the host,
viewed there as ONNX's exact types (a narrow int held in int32 first narrowed to its own
width, little-endian as the spec says) and sent back to the input's device: a sync point,
and no gradient (a reinterpretation of bits has none).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.onnx.dtypes import dtype_of_array, numpy_dtype, onnx_name
from ember.onnx.ops.registry import Node, numpy_op, op
from ember.tensor import Tensor


def _bitcast(node: Node) -> Callable[[np.ndarray], np.ndarray]:
    """The host function of a BitCast node."""
    to = node.attr("to")
    if to is None:
        raise node.error("needs the attribute 'to'")
    target = numpy_dtype(int(to), f"ONNX {node.where}: to")
    source_type = node.elem_type(0)

    def cast(x: np.ndarray) -> np.ndarray:
        source = numpy_dtype(source_type, f"ONNX {node.where}: input") if source_type else x.dtype
        if source.itemsize != target.itemsize:
            raise node.attr_error(
                "to",
                f"{onnx_name(int(to))} has {8 * target.itemsize} bits and the input "
                f"({source}) {8 * source.itemsize}: BitCast keeps the width",
            )
        exact = np.array(x, dtype=source.newbyteorder("<"), order="C")  # a copy: a 0-d array stays 0-d
        return exact.view(target.newbyteorder("<")).astype(target)

    return cast


@op("BitCast", since=26)
def bitcast(node: Node) -> Callable[..., Any]:
    cast = _bitcast(node)

    def run(x: Tensor) -> Tensor:
        out = cast(x.to_numpy())
        return Tensor.from_data(out, device=x.device, dtype=dtype_of_array(out, f"ONNX {node.where}: output"))

    return run


@numpy_op("BitCast")
def bitcast_numpy(node: Node) -> Callable[..., Any]:
    return _bitcast(node)
