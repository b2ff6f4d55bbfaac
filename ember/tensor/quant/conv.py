"""``quantized_conv``: a convolution whose weight is a :class:`QuantizedTensor`, as a
GEMM that reads the packed weight.

The weight ``[channels_out, channels_in / groups, *kernel]`` is stored as the matrix
``[channels_out, channels_in / groups * prod(kernel)]`` (one row per output channel,
the columns channel-major then kernel tap, as PyTorch flattens a conv weight). It runs
as the fused op ``QUANTIZED_CONV``: flex's kernel (compiled im2col, then the
packed-weight GEMM) never builds the float weight; elsewhere the composite
(:mod:`ember.backend.composites.quantized_conv`) multiplies the input's sliding blocks
by the packed weight through ``quantized_linear``. Inside ``ember.compile`` it is one
library call of the graph.
"""

from __future__ import annotations

import math
from typing import Any

from ember.backend.dtype import DType
from ember.backend.module_ops import conv_output_size
from ember.backend.ops import FusedOp
from ember.errors import DTypeError, ShapeError
from ember.tensor.checks import check_device
from ember.tensor.fused import fused
from ember.tensor.layer_ops import _check_bias, _check_output, _groups, _input, _padding, _per_dim
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
    channels = x.dims()[1]
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
    scheme = weight.scheme
    if (scheme.activations == "static") != (input_scale is not None):
        raise ShapeError(
            f"ember: {op}: a 'static' activation scheme needs input_scale (from calibration) and other schemes take "
            f"none; scheme {scheme!r}, input_scale {'given' if input_scale is not None else 'missing'}"
        )
    d = x.device
    # The weight lives on the inner device (it never requires grad); the input may be tracked.
    for part in (weight.values, bias, input_scale):
        if part is not None and part.device is not d and part.device is not d.inner():
            check_device(op, x, part)
    if x.dtype != DType.FLOAT32:
        x = x.cast(DType.FLOAT32)
    if bias is not None and bias.dtype != DType.FLOAT32:
        bias = bias.cast(DType.FLOAT32)
    tracked = d._inner is not None

    def prim(t: Tensor | None) -> object:
        if t is None:
            return None
        return (t.to_device(d) if tracked and t.device is not d else t)._primitive

    y = Tensor(
        fused(
            FusedOp.QUANTIZED_CONV,
            d,
            x._primitive,
            prim(weight.values),
            prim(weight.scales),
            prim(weight.zero_points),
            prim(bias),
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
        ),
        d,
    )
    return y.squeeze_dim(0) if unbatched else y
