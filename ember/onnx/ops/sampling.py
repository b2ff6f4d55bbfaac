"""GridSample (opset 16's and 20's mode names, 2-D and 3-D) onto
``ember.nn.functional.grid_sample``: differentiable for the input and the grid."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
