"""``quantized_conv``: a convolution whose weight is a :class:`QuantizedTensor`, as a
GEMM that reads the packed weight.

The weight ``[channels_out, channels_in / groups, *kernel]`` is stored as the matrix
``[channels_out, channels_in / groups * prod(kernel)]`` (one row per output channel,
the columns channel-major then kernel tap, as PyTorch flattens a conv weight). The
input's sliding blocks (strided slices of the zero-padded input, stacked: no
arithmetic) become the rows of a matrix ``[batch * positions, channels_in / groups *
prod(kernel)]`` per group, and :func:`quantized_linear` multiplies them by the packed
weight: on flex its kernels dequantize in registers and the float weight never exists.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from ember.backend.dtype import DType
from ember.backend.module_ops import conv_output_size
from ember.errors import DTypeError, ShapeError
from ember.tensor.layer_ops import _check_bias, _check_output, _groups, _input, _padding, _per_dim
from ember.tensor.quant.linear import quantized_linear
from ember.tensor.quant.qtensor import QuantizedTensor
from ember.tensor.tensor import Tensor

__all__ = ["quantized_conv"]


def quantized_conv(
    x: Tensor,
    weight: QuantizedTensor,
    kernel_shape: tuple[int, ...] | list[int],
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    input_scale: Tensor | None = None,
) -> Tensor:
    """The convolution of ``x`` ``[batch, channels_in, *spatial]`` (or unbatched) with the
    quantized ``weight`` (the matrix of a ``kernel_shape`` weight), for 1-3 spatial dims;
    ``stride``, ``padding`` and ``dilation`` as :func:`ember.tensor.layer_ops.conv2d` takes them.

    An activation scheme quantizes the rows of sliding blocks as :func:`quantized_linear`
    quantizes its input rows (per row for ``"dynamic"``)."""
    kernel_shape = tuple(int(d) for d in kernel_shape)
    rank = len(kernel_shape) - 2
    op = f"quantized_conv{rank}d"
    if not isinstance(weight, QuantizedTensor):
        raise DTypeError(f"ember: {op}: the weight must be a QuantizedTensor, got {type(weight).__name__}")
    if rank < 1 or rank > 3:
        raise ShapeError(
            f"ember: quantized_conv: kernel_shape must be [out, in/groups, *kernel] with 1-3 spatial dims, got {list(kernel_shape)}"
        )
    c_out, c_per_group = kernel_shape[:2]
    kernel = kernel_shape[2:]
    if weight.dims() != [c_out, c_per_group * math.prod(kernel)]:
        raise ShapeError(
            f"ember: {op}: the weight {weight.dims()} is not the matrix of a {list(kernel_shape)} kernel "
            f"([{c_out}, {c_per_group * math.prod(kernel)}])"
        )
    x, unbatched = _input(op, x, rank)
    groups = _groups(op, groups)
    stride = _per_dim(op, "stride", stride, rank, 1)
    dilation = _per_dim(op, "dilation", dilation, rank, 1)
    n, channels = x.dims()[:2]
    if channels != c_per_group * groups or c_out % groups:
        raise ShapeError(
            f"ember: {op}: the input has {channels} channels but the weight {list(kernel_shape)} with groups={groups} "
            f"expects {c_per_group * groups} (and output channels divisible by the groups); input shape {x.dims()}"
        )
    _check_bias(op, bias, c_out)
    spatial = tuple(x.dims()[2:])
    pads = _padding(op, padding, spatial, kernel, stride, dilation)
    outs = tuple(conv_output_size(*a) for a in zip(spatial, kernel, stride, pads, dilation))
    _check_output(op, x, outs, f"the kernel {list(kernel)} (dilation {list(dilation)}) is larger than the padded input")
    y = _device_kernel(x, weight, bias, input_scale, kernel, stride, pads, dilation, outs, groups)
    if y is not None:
        return y.squeeze_dim(0) if unbatched else y
    flat = [p for before, after in reversed(pads) for p in (before, after)]
    padded = x.pad(flat, 0.0) if any(flat) else x
    rank_x = x.rank
    # Each tap's block as [batch, *out, channels, 1] (views), joined along the last dim (one copy):
    # [batch, *out, channels, taps], i.e. rows [batch * positions, groups, c_per_group * taps].
    channels_last = [0, *range(2, rank_x), 1, rank_x]
    unit = padded.unsqueeze_dim(rank_x)
    blocks = []
    for offsets in itertools.product(*[range(k) for k in kernel]):
        ranges = [(o * d, o * d + (size - 1) * s + 1, s) for o, d, size, s in zip(offsets, dilation, outs, stride)]
        blocks.append(unit.slice([None, None, *ranges, None]).permute(channels_last))
    positions = math.prod(outs)
    taps = len(blocks)
    rows = Tensor.cat(blocks, rank_x).reshape([n * positions, groups, c_per_group * taps])
    per_group = c_out // groups
    results = []
    for g in range(groups):
        part = weight if groups == 1 else _rows(weight, g * per_group, per_group)
        b = None if bias is None else (bias if groups == 1 else bias.narrow(0, g * per_group, per_group))
        results.append(quantized_linear(rows.select_dim(1, g), part, b, input_scale))
    y = results[0] if groups == 1 else Tensor.cat(results, 1)
    y = y.reshape([n, *outs, c_out]).permute([0, rank_x - 1, *range(1, rank_x - 1)])
    return y.squeeze_dim(0) if unbatched else y


def _device_kernel(
    x: Tensor,
    weight: QuantizedTensor,
    bias: Tensor | None,
    input_scale: Tensor | None,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    pads: tuple[tuple[int, int], ...],
    dilation: tuple[int, ...],
    outs: tuple[int, ...],
    groups: int,
) -> Tensor | None:
    """The device backend's own ``quantized_conv`` (flex's: the compiled im2col, then the
    packed-weight GEMM, :mod:`ember.backend.flex.quant_conv`), or ``None`` where it has
    none or declines: other backends, a tracked (autodiff) or recording device, a
    float16 input; the sliding blocks built with tensor ops then compute the same."""
    d = x.device
    run = getattr(d._backend, "quantized_conv", None)
    parts = (weight.values, weight.scales, weight.zero_points, bias, input_scale)
    if run is None or x.dtype != DType.FLOAT32 or any(p is not None and p.device is not d for p in parts):
        return None
    if bias is not None and bias.dtype != DType.FLOAT32:
        return None

    def prim(t: Tensor | None) -> object:
        return None if t is None else t._primitive

    scheme = weight.scheme
    y = run(
        x._primitive,
        *(prim(p) for p in parts[:-1]),
        prim(input_scale),
        scheme.value,
        weight.group,
        scheme.activations or "",
        kernel,
        stride,
        pads,
        dilation,
        outs,
        groups,
    )
    return None if y is NotImplemented else Tensor(y, d)


def _rows(weight: QuantizedTensor, start: int, count: int) -> QuantizedTensor:
    """Rows ``start .. start + count`` of a quantized matrix (scales per tensor stay as they are)."""
    zp = weight.zero_points
    per_row = weight.scheme.level != "tensor"
    scales = weight.scales.narrow(0, start, count) if per_row else weight.scales
    zps = None if zp is None else (zp.narrow(0, start, count) if per_row else zp)
    values = weight.values.narrow(0, start, count)
    return QuantizedTensor(values, scales, zps, weight.scheme, (count, weight.dims()[1]))
