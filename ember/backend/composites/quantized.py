"""``quantized_linear``: ``x @ dequantize(w).T + bias`` where a backend has no kernel
(flex's never materialise the float weight; cube's cover the weight-only schemes).

The weight is dequantized with primitive ops (int4: the two nibbles of each byte by
``floor(v / 16)`` and the remainder, laid out as ``ember.tensor.quant`` packs them), and
for an activation scheme the input is first rounded to the int8 grid a kernel uses: per
row ``max |x| / 127`` (dynamic) or the calibrated scale (static), clamped to
``[-127, 127]``. So every device computes the same function.
"""

from __future__ import annotations

from typing import Any

from ember.backend.composites.layers import transpose
from ember.backend.composites.registry import composite, run
from ember.backend.dtype import DType
from ember.backend.ops import BinaryOp, ReduceOp, UnaryOp

__all__ = ["dequantize", "fake_quantize_int8", "quantized_linear"]

_INT8_MAX = 127.0


@composite("quantized_linear")
def quantized_linear(
    ops: Any,
    x: Any,
    values: Any,
    scales: Any,
    zero_points: Any,
    bias: Any,
    input_scale: Any,
    value: str,
    group: int,
    activations: str,
    activation: str = "",
) -> Any:
    """``x [..., K] -> [..., N]`` with the packed weight ``values`` ``[N, K or K/2]``, then
    the fused op ``activation`` (``""``: none; a compiled plan folds a ReLU into the call)."""
    d_out, d_in = values.shape[0], x.shape[-1]
    weight = dequantize(ops, values, scales, zero_points, value, group, (d_out, d_in))
    if activations:
        x = fake_quantize_int8(ops, x, input_scale)
    out = ops.matmul(x, transpose(ops, weight))
    out = out if bias is None else ops.binary(BinaryOp.ADD, out, bias)
    return run(ops, activation, out) if activation else out


def dequantize(
    ops: Any, values: Any, scales: Any, zero_points: Any, value: str, group: int, shape: tuple[int, int]
) -> Any:
    """The float32 matrix ``shape`` that packed ``values`` with one scale (and zero
    point) per ``group`` values of a row stand for; ``scales`` ``[rows or 1, groups]``."""
    rows, cols = shape
    groups = cols // group
    v = ops.cast(values, DType.FLOAT32)
    if value == "int4":  # byte j of a group: value j (low nibble) and j + group/2 (high)
        v = ops.reshape(v, (rows, groups, group // 2))
        high = ops.unary(UnaryOp.FLOOR, ops.binary(BinaryOp.DIV, v, 16.0))
        low = ops.binary(BinaryOp.SUB, v, ops.binary(BinaryOp.MUL, high, 16.0))
        q = ops.cat([low, high], 2)
    else:
        q = ops.reshape(v, (rows, groups, group))
    srows = scales.shape[0]
    if zero_points is not None:
        q = ops.binary(BinaryOp.SUB, q, ops.reshape(ops.cast(zero_points, DType.FLOAT32), (srows, groups, 1)))
    elif value == "int4":
        q = ops.binary(BinaryOp.SUB, q, 8.0)
    return ops.reshape(ops.binary(BinaryOp.MUL, q, ops.reshape(scales, (srows, groups, 1))), shape)


def fake_quantize_int8(ops: Any, x: Any, input_scale: Any) -> Any:
    """``x`` rounded to the int8 grid the kernels use: per row (the last dim)
    ``max |x| / 127`` (``input_scale`` ``None``), or the calibrated ``input_scale``;
    values clamped to ``[-127, 127]``."""
    if input_scale is None:
        top = ops.reduce(ReduceOp.MAX, ops.unary(UnaryOp.ABS, x), len(x.shape) - 1)
        scale = ops.clamp(ops.binary(BinaryOp.DIV, top, _INT8_MAX), 1e-30, None)
    else:
        scale = input_scale
    q = ops.clamp(ops.unary(UnaryOp.ROUND, ops.binary(BinaryOp.DIV, x, scale)), -_INT8_MAX, _INT8_MAX)
    return ops.binary(BinaryOp.MUL, q, scale)
