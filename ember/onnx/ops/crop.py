"""CenterCropPad and ReverseSequence: reorderings whose positions are computed on the
host from shapes and lengths; the values move with ember's narrow, pad and gather."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.onnx.ops.common import axes, ints
from ember.onnx.ops.registry import Node, op
from ember.tensor import Tensor


@op("CenterCropPad", host=(1,), since=18)
def center_crop_pad(node: Node) -> Callable[..., Any]:
    chosen = node.ints("axes")

    def run(x: Tensor, shape: Any) -> Tensor:
        rank = x.rank
        which = axes(node, chosen, rank) if chosen is not None else list(range(rank))
        widths = [0] * (2 * rank)  # Tensor.pad's (before, after) pairs, from the last dim backward
        for a, target in zip(which, ints(shape)):
            size = x.dims()[a]
            if target < size:  # crop: the extra one (odd difference) comes off the end
                x = x.narrow(a, (size - target) // 2, target)
            elif target > size:
                before = (target - size) // 2
                widths[2 * (rank - 1 - a)] = before
                widths[2 * (rank - 1 - a) + 1] = target - size - before
        return x.pad(widths) if any(widths) else x

    return run


@op("ReverseSequence", host=(1,), since=10)
def reverse_sequence(node: Node) -> Callable[..., Any]:
    batch_axis = int(node.attr("batch_axis", 1))
    time_axis = int(node.attr("time_axis", 0))

    def run(x: Tensor, lengths: Any) -> Tensor:
        shape = x.dims()
        steps, batches = shape[time_axis], shape[batch_axis]
        t = np.arange(steps)[:, None]
        n = np.asarray(lengths, np.int64).reshape(1, batches)
        source = np.where(t < n, n - 1 - t, t)  # [time, batch]: the first n[b] reversed
        view = [1] * len(shape)
        view[time_axis], view[batch_axis] = steps, batches
        order = source if time_axis < batch_axis else source.T
        index = np.broadcast_to(order.reshape(view), shape).astype(np.int64)
        return x.gather(time_axis, Tensor.from_data(np.ascontiguousarray(index), device=x.device))

    return run
