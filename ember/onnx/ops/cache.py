"""TensorScatter (opset 24): a key/value cache update. Each batch element's ``update``
is written into ``past_cache`` along ``axis`` from its own position (``write_indices``,
read on the host; ``mode="circular"`` wraps around the cache's length).

The result is one gather from ``past_cache`` and ``update`` side by side: every cache
position reads either itself or the update written over it, so the values are copied
exactly and the gradient reaches both inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.onnx.ops.common import axis as normalize_axis
from ember.onnx.ops.registry import Node, op
from ember.tensor import Tensor


@op("TensorScatter", since=24, host=(2,))
def tensor_scatter(node: Node) -> Callable[..., Any]:
    mode = node.attr("mode", "linear")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in ("linear", "circular"):
        raise node.attr_error("mode", "must be 'linear' or 'circular'")
    given = int(node.attr("axis", -2))

    def run(past: Tensor, update: Tensor, write: Any = None) -> Tensor:
        shape, new = past.dims(), update.dims()
        axis = normalize_axis(node, given, len(shape))
        if axis == 0:
            raise node.attr_error("axis", "must not be the batch axis 0")
        if len(new) != len(shape) or any(a != b for i, (a, b) in enumerate(zip(shape, new)) if i != axis):
            raise node.error(f"update {new} must match past_cache {shape} outside axis {axis}")
        length, count = shape[axis], new[axis]
        if count > length:
            raise node.error(f"update writes {count} positions along axis {axis}, the cache holds {length}")
        batch = shape[0]
        starts = np.zeros(batch, np.int64) if write is None else np.asarray(write, np.int64).reshape(-1)
        if starts.shape != (batch,):
            raise node.error(f"write_indices must hold one position per batch element ({batch}), got {starts.shape}")
        source = np.broadcast_to(np.arange(length, dtype=np.int64), (batch, length)).copy()
        for b, start in enumerate(starts):
            targets = start + np.arange(count)
            if mode == "circular":
                targets %= length
            elif count and (start < 0 or targets[-1] >= length):
                raise node.error(f"write_indices[{b}]={start} writes past the cache's length {length}")
            source[b, targets] = length + np.arange(count)  # the update's positions follow the cache's
        view = [batch] + [length if d == axis else 1 for d in range(1, len(shape))]
        index = Tensor.from_data(source.reshape(view), device=past.device)
        full = [length if d == axis else n for d, n in enumerate(shape)]
        return Tensor.cat([past, update.cast(past.dtype)], axis).gather(axis, index.expand(full))

    return run
