"""GridSample (opset 16's and 20's mode names, 2-D and 3-D) onto
``ember.nn.functional.grid_sample``, differentiable for the input and the grid, and
DeformConv (2-D), whose taps are sampled by it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.nn import functional as F
from ember.onnx.ops.registry import Node, op
from ember.tensor import Tensor

#: ONNX's mode names (opset 16 and opset 20) -> ember's.
_MODES = {"bilinear": "bilinear", "linear": "bilinear", "nearest": "nearest"}
_PADDING = ("zeros", "border", "reflection")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@op("GridSample", since=16)
def grid_sample(node: Node) -> Callable[..., Any]:
    mode = _text(node.attr("mode", "linear" if node.version >= 20 else "bilinear"))
    if mode not in _MODES:
        raise node.attr_error(
            "mode", "ember samples with 'linear'/'bilinear' or 'nearest' ('cubic'/'bicubic' is not supported)"
        )
    padding = _text(node.attr("padding_mode", "zeros"))
    if padding not in _PADDING:
        raise node.attr_error("padding_mode", f"must be one of {', '.join(_PADDING)}")
    align = bool(int(node.attr("align_corners", 0)))

    def run(x: Tensor, grid: Tensor) -> Tensor:
        if x.rank not in (4, 5):
            raise node.error(f"X must be 4-D [N, C, H, W] or 5-D [N, C, D, H, W] for ember, got {x.dims()}")
        return F.grid_sample(x, grid.cast(x.dtype), mode=_MODES[mode], padding_mode=padding, align_corners=align)

    return run


@op("DeformConv", since=19)
def deform_conv(node: Node) -> Callable[..., Any]:
    """2-d deformable convolution (v1, and v2 with a mask): each kernel tap reads the
    input bilinearly (zeros outside) at its grid position moved by a learned offset, as
    ``grid_sample`` with ``align_corners=True``; the taps' columns then meet the weight in
    one grouped matmul, as an im2col convolution."""
    kernel_attr = node.ints("kernel_shape")
    strides = node.ints("strides", [1, 1])
    dilations = node.ints("dilations", [1, 1])
    pads = node.ints("pads", [0, 0, 0, 0])
    groups = int(node.attr("group", 1))
    offset_groups = int(node.attr("offset_group", 1))
    if len(strides) != 2 or len(dilations) != 2 or len(pads) != 4:
        raise node.error("ember implements 2-d DeformConv only (strides, dilations: 2 values; pads: 4)")

    def run(x: Tensor, w: Tensor, offset: Tensor, bias: Tensor | None = None, mask: Tensor | None = None) -> Tensor:
        if x.rank != 4 or w.rank != 4:
            raise node.error(f"X {x.dims()} and W {w.dims()} must be 4-d: ember implements 2-d DeformConv only")
        n, c, h, width = x.dims()
        m = w.dims()[0]
        kh, kw = kernel_attr or w.dims()[2:]
        taps = kh * kw
        oh, ow = offset.dims()[2:]
        if c % groups or m % groups or w.dims()[1] * groups != c or c % offset_groups:
            raise node.error(
                f"X has {c} channels, W is {w.dims()}: does not fit group={groups}, offset_group={offset_groups}"
            )
        if offset.dims()[:2] != [n, offset_groups * taps * 2]:
            raise node.error(f"offset {offset.dims()} must be [N, offset_group * kh * kw * 2, out_h, out_w]")
        rows = (np.arange(kh) * dilations[0])[:, None, None, None] + (np.arange(oh) * strides[0] - pads[0])[
            None, None, :, None
        ]
        cols = (np.arange(kw) * dilations[1])[None, :, None, None] + (np.arange(ow) * strides[1] - pads[1])[
            None, None, None, :
        ]
        moves = offset.reshape([n, offset_groups, kh, kw, 2, oh, ow])
        dtype = x.dtype
        ys = moves.narrow(4, 0, 1).squeeze_dim(4) + Tensor.from_data(rows.astype(dtype.np), device=x.device)
        xs = moves.narrow(4, 1, 1).squeeze_dim(4) + Tensor.from_data(cols.astype(dtype.np), device=x.device)
        grid = Tensor.stack([xs * (2.0 / (width - 1)) - 1.0, ys * (2.0 / (h - 1)) - 1.0], 6)
        grid = grid.reshape([n * offset_groups, taps * oh, ow, 2])
        planes = x.reshape([n * offset_groups, c // offset_groups, h, width])
        sampled = F.grid_sample(planes, grid, mode="bilinear", padding_mode="zeros", align_corners=True)
        sampled = sampled.reshape([n, offset_groups, c // offset_groups, taps, oh * ow])
        if mask is not None:
            sampled = sampled * mask.reshape([n, offset_groups, 1, taps, oh * ow]).cast(dtype)
        columns = sampled.reshape([n, groups, (c // groups) * taps, oh * ow])
        out = w.reshape([groups, m // groups, (c // groups) * taps]).matmul(columns).reshape([n, m, oh, ow])
        return out if bias is None else out + bias.reshape([1, m, 1, 1])

    return run
