"""Quantized weights of an ONNX graph imported as ember's :class:`QuantizedTensor`, run by
the quantized kernels (``quantized_linear``, ``quantized_conv``) instead of a float
weight made at load.

Two patterns, both found before the graph is planned:

- **QDQ**: ``DequantizeLinear`` of an int8, uint8, int4 or uint4 initializer (scale and zero point
  constants; per tensor, per output channel, or blocked along the reduced axis) read only
  as the weight of ``MatMul``, ``Gemm`` (``transA=0``) or ``Conv``. The node is dropped;
  each reader multiplies by the packed weight. The result is the float product with the
  dequantized weight, as the graph defines it.
- **Integer products**: ``MatMulInteger`` or ``ConvInteger`` with an int8 or uint8
  initializer weight whose int32 result is read only by a ``Cast`` to float (what
  onnxruntime's ``quantize_dynamic`` emits). The pair runs as the product of the centered
  activations (``a - a_zero_point``, exact small integers in float32) with the packed
  weight, scale 1: the integer sum accumulated in float32 instead of int32, so equal to the
  graph's result while partial sums stay below 2**24 and within float32 rounding above.

- **QLinear products**: ``QLinearMatMul`` and ``QLinearConv`` with an int8 or uint8
  initializer weight whose float32 sum is exact for every input (checked at load:
  ``255 * sum |w - z|`` per output, plus its bias, below 2**24): the same integers as the
  int32 accumulator, requantized as the plain operator does, so the same result.

ONNX's signed weights with a non-zero zero point are stored as ember's asymmetric uint8
(values and zero points shifted by 128, an exact change of representation); a weight whose
scales vary along the reduced axis, or another layout, is left to the plain operators.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from ember.backend.dtype import DType
from ember.errors import OnnxError
from ember.onnx import proto
from ember.onnx.ops.nn import _conv_pads
from ember.onnx.ops.quant import _output_type, _quant_type, requantize_conv, requantize_matmul
from ember.onnx.program import NONE_SLOT, Step
from ember.onnx.support import check_attributes
from ember.tensor import Tensor
from ember.tensor.quant import QuantizedTensor, QuantScheme, quantized_linear
from ember.tensor.quant.conv import quantized_conv

if TYPE_CHECKING:
    from ember.onnx.ops import OpDef
    from ember.onnx.plan import Planner

__all__ = ["QuantizedUse", "find_quantized_weights", "add_quantized"]

_ONNX = ("", "ai.onnx")
_READERS = {"MatMul", "Gemm", "Conv"}
_INTEGER = {"MatMulInteger": "MatMul", "ConvInteger": "Conv"}
_QLINEAR = {"QLinearMatMul", "QLinearConv"}
#: ONNX's 4-bit ints as the loader reads them (ml_dtypes), and every weight type taken.
_INT4 = (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4))
_WEIGHT_TYPES = (np.dtype(np.int8), np.dtype(np.uint8), *_INT4)
#: Each reader's inputs (omitted trailing ones are passed as None).
_ARITY = {"MatMul": 2, "Gemm": 3, "Conv": 3, "MatMulInteger": 4, "ConvInteger": 4, "QLinearMatMul": 8, "QLinearConv": 9}
#: Float32 holds every integer up to this exactly: an integer sum bounded by it is exact in any order.
_EXACT = 2**24


@dataclass
class QuantizedUse:
    """A node that reads a quantized weight: the weight's parts (ember's layout: a matrix
    ``[out, in]``), the logical shape of the ONNX weight, and, for an integer product,
    the name its float result goes to (the ``Cast``'s output)."""

    values: np.ndarray
    scales: np.ndarray
    zero_points: np.ndarray | None
    scheme: QuantScheme
    onnx_shape: tuple[int, ...]
    matrix_shape: tuple[int, int] = (0, 0)  # ember's logical [out, in] (int4 values are packed)
    output: str | None = None
    #: the reader's inputs the packed parts replace (the weight, and an integer product's weight zero point)
    replaced: tuple[int, ...] = (1,)


def find_quantized_weights(
    nodes: list[Any], checked: list[Any], initializers: dict[str, np.ndarray], outputs: Any
) -> tuple[list[Any], list[Any], dict[int, QuantizedUse]]:
    """The nodes and their checked op definitions without the ones the quantized readers
    replace (a dropped ``DequantizeLinear``, an integer product's ``Cast``), and
    ``{id(reader): its quantized weight}``; ``outputs`` are the graph's outputs."""
    graph_outputs = {out.name for out in outputs}
    readers: dict[str, list[tuple[Any, int]]] = {}
    for node in nodes:
        for i, name in enumerate(node.input):
            if name:
                readers.setdefault(name, []).append((node, i))
    dropped: set[int] = set()
    uses: dict[int, QuantizedUse] = {}
    for node in nodes:
        if node.domain not in _ONNX:
            continue
        if node.op_type == "DequantizeLinear":
            out = node.output[0]
            found = readers.get(out, [])
            if not found or out in graph_outputs or not all(_reads_weight(r, i) for r, i in found):
                continue
            parts = [_dequantize_parts(node, initializers, r) for r, _ in found]
            if any(p is None for p in parts):
                continue
            dropped.add(id(node))
            for (reader, _), use in zip(found, parts):
                assert use is not None
                uses[id(reader)] = use
        elif node.op_type in _INTEGER and len(node.input) > 1 and node.input[1] in initializers:
            found = readers.get(node.output[0], [])
            if len(found) != 1 or node.output[0] in graph_outputs:
                continue
            cast, _ = found[0]
            if cast.op_type != "Cast" or cast.domain not in _ONNX or _attr(cast, "to", 0) != 1:
                continue
            use = _integer_parts(node, initializers)
            if use is None:
                continue
            use.output = cast.output[0]
            dropped.add(id(cast))
            uses[id(node)] = use
        elif node.op_type in _QLINEAR and len(node.input) > 5 and node.input[3] in initializers:
            use = _integer_parts(node, initializers)
            if use is not None:
                uses[id(node)] = use
    kept = [(n, c) for n, c in zip(nodes, checked) if id(n) not in dropped]
    return [n for n, _ in kept], [c for _, c in kept], uses


def _attr(node: Any, key: str, default: Any) -> Any:
    for a in node.attribute:
        if a.name == key:
            return proto.attribute_value(node, key)
    return default


def _reads_weight(node: Any, i: int) -> bool:
    if node.domain not in _ONNX or node.op_type not in _READERS or i != 1:
        return False
    return not (node.op_type == "Gemm" and _attr(node, "transA", 0))


def _weight_layout(reader: Any, shape: tuple[int, ...]) -> tuple[int, int, bool] | None:
    """``(out_axis, in_axis, transposed)`` of a reader's weight: which ONNX axis holds the
    outputs (ember's rows) and which the reduced inputs; ``None`` for a shape it cannot take."""
    if reader.op_type == "Conv":
        return (0, 1, False) if len(shape) >= 3 else None
    if len(shape) != 2:
        return None
    if reader.op_type == "Gemm" and _attr(reader, "transB", 0):
        return 0, 1, False
    return 1, 0, True  # MatMul and Gemm(transB=0): [K, N]


def _dequantize_parts(node: Any, initializers: dict[str, np.ndarray], reader: Any) -> QuantizedUse | None:
    names = list(node.input) + [""] * 3
    x = initializers.get(names[0])
    scale = initializers.get(names[1])
    zero = initializers.get(names[2]) if names[2] else None
    if x is None or scale is None or (names[2] and zero is None):
        return None
    if x.dtype not in _WEIGHT_TYPES or scale.dtype != np.float32 or _attr(node, "output_dtype", 0) not in (0, 1):
        return None
    layout = _weight_layout(reader, x.shape)
    if layout is None:
        return None
    out_axis, in_axis, transposed = layout
    axis = int(_attr(node, "axis", 1)) % x.ndim
    block = int(_attr(node, "block_size", 0))
    rows = x.shape[out_axis]
    cols = x.size // rows
    taps = cols // x.shape[in_axis]  # a conv's kernel positions per input channel (scales per tap: no block)
    if scale.size == 1:
        level, group = "tensor", cols
    elif block == 0 and axis == out_axis and scale.shape == (rows,):
        level, group = "channel", cols
    elif block >= 2 and taps == 1 and axis == in_axis and x.shape[in_axis] % block == 0:
        level, group = "block", block
    else:
        return None
    matrix = x.T if transposed else x.reshape(rows, cols)
    groups = cols // group
    if x.dtype in _INT4 and group % 2:
        return None  # two values of a group per byte
    if level == "block":  # scales [K / block, N] (MatMul) or [N, K / block] (Gemm, transB=1)
        s = (scale.T if transposed else scale).reshape(rows, groups)
        z = None if zero is None else (zero.T if transposed else zero).reshape(rows, groups)
    else:
        shape = (1, 1) if level == "tensor" else (rows, 1)
        s, z = scale.reshape(shape), None if zero is None else zero.reshape(shape)
    return _use(np.ascontiguousarray(matrix), np.ascontiguousarray(s, dtype=np.float32), z, level, group, x.shape)


def _integer_parts(node: Any, initializers: dict[str, np.ndarray]) -> QuantizedUse | None:
    """The weight of an integer product (``MatMulInteger``/``ConvInteger``: weight 1, zero
    point 3; ``QLinearMatMul``/``QLinearConv``: weight 3, zero point 5) as a packed
    matrix with scale 1. A QLinear operator requantizes its sum, so it takes the packed
    weight only where the float32 sum is exact for every input: ``255 * sum |w - z|`` over
    each output's weights (plus its bias) below 2**24."""
    qlinear = node.op_type in _QLINEAR
    weight_at, zero_at = (3, 5) if qlinear else (1, 3)
    names = list(node.input) + [""] * 9
    w = initializers.get(names[weight_at])
    zero = initializers.get(names[zero_at]) if names[zero_at] else None
    if w is None or w.dtype not in (np.int8, np.uint8) or (names[zero_at] and zero is None):
        return None
    conv = node.op_type in ("ConvInteger", "QLinearConv")
    if (conv and w.ndim < 3) or (not conv and w.ndim != 2):
        return None
    rows = w.shape[0] if conv else w.shape[1]
    cols = w.size // rows
    if zero is not None and zero.size not in (1, rows):
        return None
    matrix = w.reshape(rows, cols) if conv else w.T
    if qlinear:
        centered = matrix.astype(np.int64) - (0 if zero is None else zero.reshape(-1, 1).astype(np.int64))
        bound = 255 * np.abs(centered).sum(axis=1)
        if node.op_type == "QLinearConv" and names[8]:
            bias = initializers.get(names[8])
            if bias is None:
                return None
            bound = bound + np.abs(bias.astype(np.int64)).reshape(-1)
        if int(bound.max()) >= _EXACT:
            return None
    level = "tensor" if zero is None or zero.size == 1 else "channel"
    shape = (1, 1) if level == "tensor" else (rows, 1)
    z = None if zero is None else zero.reshape(shape)
    use = _use(np.ascontiguousarray(matrix), np.ones(shape, np.float32), z, level, cols, w.shape)
    use.replaced = (weight_at, zero_at)
    return use


def _use(
    matrix: np.ndarray, scales: np.ndarray, zero: np.ndarray | None, level: str, group: int, shape: tuple[int, ...]
) -> QuantizedUse:
    """ember's parts of an ONNX quantized matrix: symmetric when the values are signed with
    zero points 0, else asymmetric unsigned (signed values and zero points shifted by 128,
    or by 8 for int4: exact). int4 is packed as ``ember.tensor.quant`` packs it."""
    block = group if level == "block" else None
    int4 = matrix.dtype in _INT4
    value = "int4" if int4 else "int8"
    signed = matrix.dtype in (np.dtype(np.int8), np.dtype(ml_dtypes.int4))
    shift = 8 if int4 else 128
    symmetric = signed and (zero is None or not zero.astype(np.int16).any())
    z = None
    if not symmetric:
        z16 = np.zeros(scales.shape, np.int16) if zero is None else np.broadcast_to(zero.astype(np.int16), scales.shape)
        z = np.ascontiguousarray(z16 + (shift if signed else 0)).astype(np.uint8)
    if int4:  # nibbles 0..15: a signed value plus 8 (ember's symmetric int4 subtracts 8)
        u = (matrix.astype(np.int16) + (8 if signed else 0)).astype(np.uint8)
        rows, cols = u.shape
        grouped = u.reshape(rows, cols // group, group)
        half = group // 2
        packed = grouped[..., :half] | (grouped[..., half:] << 4)
        stored = np.ascontiguousarray(packed.reshape(rows, cols // 2))
    elif signed and not symmetric:
        stored = (matrix.astype(np.int16) + shift).astype(np.uint8)
    else:
        stored = np.ascontiguousarray(matrix)
    scheme = QuantScheme(value, symmetric, level, block)
    return QuantizedUse(stored, scales, z, scheme, tuple(shape), matrix.shape)


# ---------------------------------------------------------------------- planning a reader
def add_quantized(planner: Planner, node: Any, opdef: OpDef, version: int, use: QuantizedUse) -> None:
    """Plan ``node`` (a reader of a quantized weight) as one step over the packed parts."""
    from ember.onnx.plan import TENSOR, Value, outputs_of

    names = list(node.input) + [""] * (_ARITY[node.op_type] - len(node.input))
    values: list[Value | None] = []
    for i, name in enumerate(names):
        if i == use.replaced[0]:
            values.append(Value(TENSOR, -1, None, use.onnx_shape))
        elif not name or i in use.replaced:
            values.append(None)
        else:
            value = planner.values.get(name)
            if value is None:
                raise OnnxError(
                    f"ember: {planner.label}: {node.op_type} node {node.name!r} reads {name!r}, "
                    "which no earlier node, input or initializer defines"
                )
            values.append(value)
    view = planner.node_view(node, version, values)
    fn = _runner(node.op_type, view, use)
    ins = [
        NONE_SLOT if v is None or i in use.replaced else planner.tensor_input(names[i], v) for i, v in enumerate(values)
    ]
    ins += [_const(planner, use.values), _const(planner, use.scales)]
    ins.append(NONE_SLOT if use.zero_points is None else _const(planner, use.zero_points))
    out = use.output or outputs_of(node)[0]
    slot = planner.new_slot()
    info = planner.shapes.get(out)
    planner.values[out] = Value(TENSOR, slot, None, None if info is None else info[1])
    planner.steps.append(Step(fn, tuple(ins), slot, False, view.described() + " (quantized weight)"))
    check_attributes(planner.label, node, opdef, view)


def _const(planner: Planner, array: np.ndarray) -> int:
    slot = planner.new_slot()
    dtype = {np.dtype(np.int8): DType.INT8, np.dtype(np.uint8): DType.UINT8}.get(array.dtype, DType.FLOAT32)
    planner.const_tensors.append((slot, array, dtype))
    planner.pinned.add(slot)
    return slot


def _runner(op_type: str, view: Any, use: QuantizedUse) -> Callable[..., Tensor]:
    """The step's function: ``(*node inputs with the weight None, values, scales, zero_points)``."""
    scheme, matrix_shape = use.scheme, use.matrix_shape

    def weight(values: Tensor, scales: Tensor, zero_points: Tensor | None) -> QuantizedTensor:
        return QuantizedTensor(values, scales, zero_points, scheme, matrix_shape)

    if op_type == "MatMul":

        def matmul(a: Tensor, _w: None, values: Tensor, scales: Tensor, zps: Tensor | None) -> Tensor:
            return quantized_linear(_float(a), weight(values, scales, zps))

        return matmul
    if op_type == "MatMulInteger":

        def matmul_integer(
            a: Tensor, _w: None, a_zero: Tensor | None, _wz: None, values: Tensor, scales: Tensor, zps: Tensor | None
        ) -> Tensor:
            return quantized_linear(_centered(a, a_zero, -2), weight(values, scales, zps))

        return matmul_integer
    if op_type == "QLinearMatMul":
        elem = _quant_type(view, _output_type(view, 7, view.elem_type(0)), "the quantized output")

        def qlinear_matmul(
            a: Tensor,
            a_scale: Tensor,
            a_zero: Tensor | None,
            _w: None,
            b_scale: Tensor,
            _wz: None,
            y_scale: Tensor,
            y_zero: Tensor | None,
            values: Tensor,
            scales: Tensor,
            zps: Tensor | None,
        ) -> Tensor:
            acc = quantized_linear(_centered(a, a_zero, -2), weight(values, scales, zps))
            return requantize_matmul(acc, a, a_scale, b_scale, y_scale, y_zero, elem)

        return qlinear_matmul
    if op_type == "Gemm":
        alpha, beta = float(view.attr("alpha", 1.0)), float(view.attr("beta", 1.0))
        view.uses("transA", "transB")

        def gemm(a: Tensor, _w: None, c: Tensor | None, values: Tensor, scales: Tensor, zps: Tensor | None) -> Tensor:
            bias = c if c is not None and alpha == 1.0 and beta == 1.0 and c.dims() == [matrix_shape[0]] else None
            out = quantized_linear(_float(a), weight(values, scales, zps), None if bias is None else _float(bias))
            if alpha != 1.0:
                out = out.mul_scalar(alpha)
            if c is not None and bias is None:
                out = out + _float(c).mul_scalar(beta)
            return out

        return gemm
    spatial = len(use.onnx_shape) - 2
    strides = view.ints("strides", [1] * spatial)
    dilations = view.ints("dilations", [1] * spatial)
    groups = int(view.attr("group", 1))
    view.uses("kernel_shape")
    pads_of = _conv_pads(view, spatial)
    kernel = list(use.onnx_shape[2:])

    def conv_of(x: Tensor, bias: Tensor | None, values: Tensor, scales: Tensor, zps: Tensor | None) -> Tensor:
        pads = pads_of(x.dims()[2:], kernel, strides, dilations)
        w = weight(values, scales, zps)
        return quantized_conv(x, w, use.onnx_shape, bias, tuple(strides), tuple(pads), tuple(dilations), groups)

    if op_type == "Conv":

        def conv(x: Tensor, _w: None, b: Tensor | None, values: Tensor, scales: Tensor, zps: Tensor | None) -> Tensor:
            return conv_of(_float(x), None if b is None else _float(b), values, scales, zps)

        return conv

    if op_type == "ConvInteger":

        def conv_integer(
            x: Tensor, _w: None, x_zero: Tensor | None, _wz: None, values: Tensor, scales: Tensor, zps: Tensor | None
        ) -> Tensor:
            return conv_of(_centered(x, x_zero, None), None, values, scales, zps)

        return conv_integer
    elem_out = _quant_type(view, _output_type(view, 7, view.elem_type(0)), "the quantized output")

    def qlinear_conv(
        x: Tensor,
        x_scale: Tensor,
        x_zero: Tensor | None,
        _w: None,
        w_scale: Tensor,
        _wz: None,
        y_scale: Tensor,
        y_zero: Tensor | None,
        bias: Tensor | None,
        values: Tensor,
        scales: Tensor,
        zps: Tensor | None,
    ) -> Tensor:
        b = None if bias is None else bias.cast(DType.FLOAT32)  # exact: bounded at load
        acc = conv_of(_centered(x, x_zero, None), b, values, scales, zps)
        return requantize_conv(acc, x_scale, w_scale, y_scale, y_zero, elem_out)

    return qlinear_conv


def _float(x: Tensor) -> Tensor:
    return x if x.dtype is DType.FLOAT32 else x.cast(DType.FLOAT32)


def _centered(a: Tensor, zero: Tensor | None, row_axis: int | None) -> Tensor:
    """``a - zero_point`` as float32 (small integers: exact): one zero point, or one per row
    of a matmul's left operand."""
    q = a.cast(DType.FLOAT32)
    if zero is None:
        return q
    z = zero.cast(DType.FLOAT32)
    if z.num_elements() == 1:
        return q - z.reshape([])
    if row_axis is not None and z.rank == 1 and q.rank >= 2:
        return q - z.reshape([-1, 1])
    return q - z
