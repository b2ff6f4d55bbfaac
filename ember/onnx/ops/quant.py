"""Quantization operators: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv, with ONNX's semantics on
ember's tensor ops.

- Quantizing rounds half to even (``x / scale``, then ``round``) and saturates to the
  integer type's range: uint8, int8, uint16 and int16. Scales and zero points are
  per tensor (one value), per axis (a 1-D tensor along ``axis``) or blocked (``block_size``
  values along ``axis`` share one).
- ember holds int8, int16 and uint16 values in int32 tensors (as every ONNX import does,
  :mod:`ember.onnx.dtypes`): the values stay in the narrow type's range, and the type a
  result stands for comes from the node's zero point, its ``output_dtype`` or shape inference.
- The integer products are exact: the operands become int32 with their zero points
  subtracted and ember's int32 matmul accumulates in int32 (ONNX's accumulator). An integer
  convolution is the same matmul over the input's sliding blocks (im2col: strided slices,
  no arithmetic), for 1-3 spatial dims, groups, strides, dilations and pads.
- The QLinear operators requantize the int32 accumulator in float32 (as onnxruntime does):
  ``round(acc * (a_scale * b_scale / y_scale) + y_zero_point)``, saturated.

- The 4-bit and 2-bit ints (INT4, UINT4, INT2, UINT2) saturate to their ranges as the
  8- and 16-bit ones do. The float types (the four 8-bit floats, FLOAT4E2M1) round
  ``x / scale`` as ``Cast`` does (half to even; saturating unless ``saturate=0``), on the
  host. All are held widened (:mod:`ember.onnx.dtypes`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from ember.backend.dtype import DType
from ember.onnx.dtypes import ember_dtype, onnx_name
from ember.onnx.ops.elementwise import round_narrow
from ember.onnx.ops.nn import _conv_pads
from ember.onnx.ops.registry import Node, op
from ember.tensor import Tensor

#: ONNX integer element type -> the range its values saturate to.
RANGES = {
    2: (0, 255),
    3: (-128, 127),
    4: (0, 65535),
    5: (-32768, 32767),
    6: (-(2**31), 2**31 - 1),
    21: (0, 15),
    22: (-8, 7),
    25: (0, 3),
    26: (-2, 1),
}
FLOATS = {17, 18, 19, 20, 23}  # the 8-bit floats and FLOAT4E2M1
QUANTIZED = (2, 3, 4, 5, 21, 22, 25, 26, *sorted(FLOATS))
INTEGERS = (2, 3, 4, 5)  # what the QLinear products take
_UINT8, _INT32 = 2, 6


def _quant_type(node: Node, elem: int | None, what: str, allowed: tuple[int, ...] = QUANTIZED) -> int:
    """``elem`` checked to be a quantized integer type ember holds."""
    if elem is None:
        elem = _UINT8
    if elem not in allowed:
        names = ", ".join(onnx_name(t) for t in allowed)
        raise node.error(f"{what} has the element type {onnx_name(elem)}: ember quantizes to {names}")
    return elem


def _output_type(node: Node, zero_point: int, fallback: int | None) -> int | None:
    """The type a quantized output stands for: its zero point's, ``output_dtype``'s, the
    inferred one, else ``fallback``."""
    given = int(node.attr("output_dtype", 0) or 0)
    if node.has(zero_point):
        found = node.elem_type(zero_point)
        if found is not None:
            if given and given != found:
                raise node.attr_error("output_dtype", f"differs from the zero point's element type {onnx_name(found)}")
            return found
    return given or node.out_elem_type(0) or fallback


def _saturate(y: Tensor, elem: int) -> Tensor:
    """Float values rounded half to even, saturated to ``elem``'s range, in its ember dtype."""
    low, high = RANGES[elem]
    return y.round().clamp(float(low), float(high)).cast(ember_dtype(elem, "a quantized value"))


def _along(node: Node, v: Tensor, x_dims: list[int], axis: int, block: int, what: str) -> Tensor:
    """A scale or zero point shaped to broadcast against ``x``: one value, one per index of
    ``axis`` (a 1-D tensor) or, with ``block`` > 0, one per ``block`` indices of ``axis``."""
    if v.num_elements() == 1 and (block == 0 or v.rank <= 1):
        return v.reshape([])
    rank = len(x_dims)
    if not -rank <= axis < rank:
        raise node.attr_error("axis", f"is out of range for the input's rank {rank}")
    axis %= rank
    n = x_dims[axis]
    if block == 0:
        if v.rank != 1 or v.dims()[0] != n:
            raise node.error(
                f"{what} {v.dims()} must hold one value or one per index of axis {axis} ({n} for the input {x_dims})"
            )
        return v.reshape([n if d == axis else 1 for d in range(rank)])
    want = [-(-n // block) if d == axis else x_dims[d] for d in range(rank)]
    if v.dims() != want:
        raise node.error(f"{what} {v.dims()} must be {want} for block_size={block} on axis {axis} of {x_dims}")
    return v.repeat_interleave(block, axis).narrow(axis, 0, n)


def _float(x: Tensor) -> Tensor:
    return x if x.dtype is DType.FLOAT32 or x.dtype is DType.FLOAT64 else x.cast(DType.FLOAT32)


# ---------------------------------------------------------------------- (de)quantize
@op(["QuantizeLinear"], since=10)
def quantize_linear(node: Node) -> Callable[..., Any]:
    axis = int(node.attr("axis", 1))
    block = int(node.attr("block_size", 0))
    saturate = bool(node.attr("saturate", 1))  # float8 only: integer types always saturate
    precision = int(node.attr("precision", 0) or 0)
    elem = _quant_type(node, _output_type(node, 2, _UINT8), "the quantized output")
    compute = ember_dtype(precision, f"ONNX {node.where}: precision") if precision else None
    if compute is not None and not compute.is_float:
        raise node.attr_error("precision", "must be a float type")

    def run(x: Tensor, scale: Tensor, zero_point: Tensor | None = None) -> Tensor:
        dims = x.dims()
        s = _along(node, scale, dims, axis, block, "y_scale")
        if compute is not None:
            x, s = x.cast(compute), s.cast(compute)
        elif s.dtype is not x.dtype:
            x, s = _float(x), _float(s)
        if elem in FLOATS:  # rounded once, to the float type
            y = _float(x.div(s))
            if zero_point is not None:
                y = y + _along(node, zero_point, dims, axis, block, "y_zero_point").cast(y.dtype)
            return round_narrow(y, elem, saturate)
        y = _float(x.div(s)).round()  # rounded in the input's precision, as ONNX
        if zero_point is not None:
            y = y + _along(node, zero_point, dims, axis, block, "y_zero_point").cast(y.dtype)
        return _saturate(y, elem)

    return run


@op(["DequantizeLinear"], since=10)
def dequantize_linear(node: Node) -> Callable[..., Any]:
    axis = int(node.attr("axis", 1))
    block = int(node.attr("block_size", 0))
    given = int(node.attr("output_dtype", 0) or 0)
    out = ember_dtype(given, f"ONNX {node.where}: output_dtype") if given else None
    elem = _quant_type(node, node.elem_type(0), "the quantized input x", (*QUANTIZED, 6))
    held = DType.FLOAT32 if elem in FLOATS else DType.INT32

    def run(x: Tensor, scale: Tensor, zero_point: Tensor | None = None) -> Tensor:
        dims = x.dims()
        q = x.cast(held)
        if zero_point is not None:
            q = q - _along(node, zero_point, dims, axis, block, "x_zero_point").cast(held)
        y = q.cast(DType.FLOAT32) * _float(_along(node, scale, dims, axis, block, "x_scale"))
        return y.cast(out or scale.dtype)

    return run


@op("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(node: Node) -> Callable[..., Any]:
    def run(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        xf = _float(x)
        high = xf.max().clamp_min(0.0).reshape([])
        low = xf.min().clamp_max(0.0).reshape([])
        spread = high - low
        scale = spread.mask_fill(spread.equal_elem(0.0), 1.0) / 255.0
        zero = (low.neg() / scale).clamp(0.0, 255.0).round()
        y = _saturate(xf.div(scale).round() + zero, _UINT8)
        return y, scale.cast(x.dtype), zero.cast(DType.UINT8)

    return run


# ---------------------------------------------------------------------- integer products
def _centered(node: Node, x: Tensor, zero_point: Tensor | None, what: str, row_axis: int | None) -> Tensor:
    """``x - zero_point`` in int32. A 1-D zero point with more than one value is per row
    (``row_axis`` -2: a matmul's left operand), per column (``None``: its right operand,
    broadcast on the last axis) or per output channel (``row_axis`` 0: a conv weight)."""
    q = x.cast(DType.INT32)
    if zero_point is None:
        return q
    z = zero_point.cast(DType.INT32)
    if z.num_elements() == 1:
        return q - z.reshape([])
    if z.rank == 1 and row_axis is not None:
        axis = row_axis % q.rank
        if z.dims()[0] != q.dims()[axis]:
            raise node.error(f"{what} {z.dims()} must hold one value or one per index of axis {axis} of {q.dims()}")
        z = z.reshape([-1] + [1] * (q.rank - 1 if row_axis == 0 else 1))
    return q - z


def _matmul_integer(node: Node, a: Tensor, b: Tensor, a_zero: Tensor | None, b_zero: Tensor | None) -> Tensor:
    if a.rank < 2 or b.rank < 2:
        return _centered(node, a, a_zero, "a_zero_point", None).matmul(_centered(node, b, b_zero, "b_zero_point", None))
    return _centered(node, a, a_zero, "a_zero_point", -2).matmul(_centered(node, b, b_zero, "b_zero_point", None))


def _per_row(v: Tensor, rows: int) -> Tensor:
    """A scale of the left operand: one value, or one per row (shaped ``[rows, 1]``)."""
    return v.reshape([rows, 1]) if v.rank == 1 and v.num_elements() > 1 else v


@op("MatMulInteger", since=10)
def matmul_integer(node: Node) -> Callable[..., Any]:
    def run(a: Tensor, b: Tensor, a_zero: Tensor | None = None, b_zero: Tensor | None = None) -> Tensor:
        return _matmul_integer(node, a, b, a_zero, b_zero)

    return run


@op("QLinearMatMul", since=10)
def qlinear_matmul(node: Node) -> Callable[..., Any]:
    elem = _quant_type(node, _output_type(node, 7, node.elem_type(0)), "the quantized output", INTEGERS)

    def run(
        a: Tensor,
        a_scale: Tensor,
        a_zero: Tensor,
        b: Tensor,
        b_scale: Tensor,
        b_zero: Tensor,
        y_scale: Tensor,
        y_zero: Tensor | None = None,
    ) -> Tensor:
        acc = _matmul_integer(node, a, b, a_zero, b_zero)
        return requantize_matmul(acc.cast(DType.FLOAT32), a, a_scale, b_scale, y_scale, y_zero, elem)

    return run


def requantize_matmul(
    acc: Tensor, a: Tensor, a_scale: Tensor, b_scale: Tensor, y_scale: Tensor, y_zero: Tensor | None, elem: int
) -> Tensor:
    """QLinearMatMul's output from its accumulator ``acc`` (float32 holding the int32 sums)."""
    rows = a.dims()[-2] if a.rank >= 2 else 1
    multiplier = _per_row(a_scale, rows) * b_scale / y_scale
    y = acc * _float(multiplier)
    if y_zero is not None:
        y = y + y_zero.cast(DType.FLOAT32)
    return _saturate(y, elem)


def _int_conv(
    x: Tensor,
    w: Tensor,
    strides: list[int],
    pads: list[tuple[int, int]],
    dilations: list[int],
    groups: int,
) -> Tensor:
    """An exact int32 convolution: the input's sliding blocks (zero-padded, strided slices)
    stacked into columns and multiplied by the weight in int32."""
    n, c = x.dims()[:2]
    m = w.dims()[0]
    kernel = w.dims()[2:]
    flat = [p for before, after in reversed(pads) for p in (before, after)]
    padded = x.pad(flat, 0) if any(flat) else x
    sizes = padded.dims()[2:]
    outs = [(s - d * (k - 1) - 1) // st + 1 for s, k, st, d in zip(sizes, kernel, strides, dilations)]
    blocks = []
    for offsets in itertools.product(*[range(k) for k in kernel]):
        ranges = [(o * d, o * d + (size - 1) * st + 1, st) for o, d, size, st in zip(offsets, dilations, outs, strides)]
        blocks.append(padded.slice([None, None, *ranges]))
    taps = len(blocks)
    positions = 1
    for size in outs:
        positions *= size
    columns = Tensor.stack(blocks, 2).reshape([n, groups, (c // groups) * taps, positions])
    weight = w.reshape([groups, m // groups, (c // groups) * taps])
    return weight.matmul(columns).reshape([n, m, *outs])


def _conv_setup(node: Node, weight: int) -> Callable[[Tensor, Tensor], Tensor]:
    """The integer convolution of a ConvInteger or QLinearConv node (its attributes read;
    ``weight`` is the weight's input position)."""
    kernel_shape = node.ints("kernel_shape")
    w_shape = node.shape(weight)
    if kernel_shape is None and w_shape is None:
        raise node.error("needs kernel_shape or a weight of known rank")
    spatial = len(kernel_shape) if kernel_shape is not None else len(w_shape or ()) - 2
    strides = node.ints("strides", [1] * spatial)
    dilations = node.ints("dilations", [1] * spatial)
    groups = int(node.attr("group", 1))
    pads_of = _conv_pads(node, spatial)

    def conv(x: Tensor, w: Tensor) -> Tensor:
        if x.rank != spatial + 2 or w.rank != spatial + 2:
            raise node.error(f"X {x.dims()} and W {w.dims()} must both be [N, C, ...] with {spatial} spatial dims")
        c, m = x.dims()[1], w.dims()[0]
        if c % groups or m % groups or w.dims()[1] * groups != c:
            raise node.error(f"X has {c} channels and W is {w.dims()}: does not fit group={groups}")
        kernel = w.dims()[2:]
        pads = pads_of(x.dims()[2:], kernel, strides, dilations)
        return _int_conv(x, w, strides, list(pads), dilations, groups)

    return conv


@op("ConvInteger", since=10)
def conv_integer(node: Node) -> Callable[..., Any]:
    conv = _conv_setup(node, 1)

    def run(x: Tensor, w: Tensor, x_zero: Tensor | None = None, w_zero: Tensor | None = None) -> Tensor:
        return conv(_centered(node, x, x_zero, "x_zero_point", None), _centered(node, w, w_zero, "w_zero_point", 0))

    return run


@op("QLinearConv", since=10)
def qlinear_conv(node: Node) -> Callable[..., Any]:
    conv = _conv_setup(node, 3)
    elem = _quant_type(node, _output_type(node, 7, node.elem_type(0)), "the quantized output", INTEGERS)

    def run(
        x: Tensor,
        x_scale: Tensor,
        x_zero: Tensor,
        w: Tensor,
        w_scale: Tensor,
        w_zero: Tensor,
        y_scale: Tensor,
        y_zero: Tensor | None = None,
        bias: Tensor | None = None,
    ) -> Tensor:
        acc = conv(_centered(node, x, x_zero, "x_zero_point", None), _centered(node, w, w_zero, "w_zero_point", 0))
        channel = [1, -1] + [1] * (acc.rank - 2)
        if bias is not None:
            acc = acc + bias.cast(DType.INT32).reshape(channel)
        return requantize_conv(acc.cast(DType.FLOAT32), x_scale, w_scale, y_scale, y_zero, elem)

    return run


def requantize_conv(
    acc: Tensor, x_scale: Tensor, w_scale: Tensor, y_scale: Tensor, y_zero: Tensor | None, elem: int
) -> Tensor:
    """QLinearConv's output from its accumulator ``acc`` (float32 holding the int32 sums, bias included)."""
    channel = [1, -1] + [1] * (acc.rank - 2)
    per_channel = w_scale.reshape(channel) if w_scale.num_elements() > 1 else w_scale.reshape([])
    y = acc * _float(x_scale.reshape([]) * per_channel / y_scale.reshape([]))
    if y_zero is not None:
        y = y + y_zero.cast(DType.FLOAT32).reshape([])
    return _saturate(y, elem)
