"""``RotaryEmbedding`` (opset 23): rotates the feature pairs of each head by the angles
of its position, read from the graph's ``cos_cache``/``sin_cache`` (gathered by
``position_ids`` when given). ``interleaved`` pairs ``(x[2i], x[2i+1])``, otherwise
``(x[i], x[i + rotary_dim / 2])``; only the first ``rotary_embedding_dim`` features of
a head rotate. Inputs are ``[batch, heads, seq, head_size]`` or ``[batch, seq, hidden]``
with ``num_heads``. Written on ember's tensor ops, so it is differentiable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember.onnx.ops.registry import Node, op
from ember.tensor import Tensor


@op("RotaryEmbedding", since=23)
def rotary_embedding(node: Node) -> Callable[..., Any]:
    interleaved = bool(node.attr("interleaved", 0))
    rotary_dim = int(node.attr("rotary_embedding_dim", 0))
    num_heads = int(node.attr("num_heads", 0))

    def run(x: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | None = None) -> Tensor:
        if x.rank == 4:
            batch, heads, seq, size = x.dims()
            xs = x.permute([0, 2, 1, 3])  # [batch, seq, heads, size]
        elif x.rank == 3:
            if num_heads <= 0:
                raise node.error("a 3-d input [batch, seq, hidden] needs the num_heads attribute")
            batch, seq, hidden = x.dims()
            if hidden % num_heads:
                raise node.error(f"the hidden size {hidden} is not a multiple of num_heads={num_heads}")
            heads, size = num_heads, hidden // num_heads
            xs = x.reshape([batch, seq, heads, size])
        else:
            raise node.error(f"the input must be 3-d or 4-d, got shape {x.dims()}")
        dim = rotary_dim or size
        half = dim // 2
        if dim % 2 or dim > size:
            raise node.attr_error("rotary_embedding_dim", f"must be even and at most the head size {size}")
        if positions is not None:  # caches [max_position, half], gathered per position
            flat = positions.reshape([-1]).int()
            cos = cos.select(0, flat).reshape([batch, seq, half])
            sin = sin.select(0, flat).reshape([batch, seq, half])
        if cos.dims()[-1] != half or sin.dims()[-1] != half:
            raise node.error(f"the caches' last dimension ({cos.dims()[-1]}) must be rotary_embedding_dim / 2 = {half}")
        cos, sin = cos.unsqueeze_dim(2).cast(x.dtype), sin.unsqueeze_dim(2).cast(x.dtype)
        rot = xs.narrow(3, 0, dim)
        if interleaved:
            pairs = rot.reshape([batch, seq, heads, half, 2])
            x1, x2 = pairs.narrow(4, 0, 1).squeeze_dim(4), pairs.narrow(4, 1, 1).squeeze_dim(4)
        else:
            x1, x2 = rot.narrow(3, 0, half), rot.narrow(3, half, half)
        real = cos * x1 - sin * x2
        imag = sin * x1 + cos * x2
        if interleaved:
            rot = Tensor.stack([real, imag], 4).reshape([batch, seq, heads, dim])
        else:
            rot = Tensor.cat([real, imag], 3)
        y = rot if dim == size else Tensor.cat([rot, xs.narrow(3, dim, size - dim)], 3)
        return y.permute([0, 2, 1, 3]) if x.rank == 4 else y.reshape([batch, seq, heads * size])

    return run
