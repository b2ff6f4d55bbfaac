"""CenterCropPad, ReverseSequence, Col2Im and MaxUnpool: rearrangements whose positions
are computed from shapes, lengths and indices; the values move with ember's narrow, pad,
gather, fold and unpool (differentiable)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.onnx.ops.common import axes, ints
from ember.onnx.ops.registry import Node, op
from ember.tensor import Tensor
from ember.tensor.unfold import fold
from ember.tensor.unpool import max_unpool1d, max_unpool2d


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


@op("Col2Im", host=(1, 2), since=18)
def col2im(node: Node) -> Callable[..., Any]:
    """Columns ``[batch, channels * prod(block), blocks]`` summed back into an image (2-d:
    ember's ``fold``; asymmetric pads by folding into the padded image and cropping)."""
    node.uses("dilations", "pads", "strides")

    def run(x: Tensor, image: Any, block: Any) -> Tensor:
        size, kernel = ints(image), ints(block)
        if len(size) != 2:
            raise node.error(f"{len(size)}-d images are not supported (ember folds 2-d images)")
        dilations = node.ints("dilations", [1, 1])
        strides = node.ints("strides", [1, 1])
        pads = node.ints("pads", [0, 0, 0, 0])
        padded = [size[0] + pads[0] + pads[2], size[1] + pads[1] + pads[3]]
        out = fold(x, padded, kernel, dilations, 0, strides)
        return out.narrow(2, pads[0], size[0]).narrow(3, pads[1], size[1])

    return run


@op("MaxUnpool", host=(2,), since=9)
def max_unpool(node: Node) -> Callable[..., Any]:
    """MaxPool's indices (flat over the whole tensor, as ONNX counts them) put back into
    zeros: ember's ``max_unpool1d``/``2d`` with positions per plane."""
    kernel = node.ints("kernel_shape") or []
    rank = len(kernel)
    if rank not in (1, 2):
        raise node.attr_error("kernel_shape", f"{rank}-d unpooling is not supported (1 or 2 spatial dims)")
    strides = node.ints("strides", [1] * rank)
    pads = node.ints("pads", [0] * (2 * rank))

    def run(x: Tensor, indices: Tensor, shape: Any = None) -> Tensor:
        n, c, *spatial = x.dims()
        # The indices count positions of the inferred shape; output_shape, when larger,
        # adds zeros at the end of each spatial dim (as ONNX's reference).
        out = [
            (s - 1) * st - (pads[i] + pads[rank + i]) + k for i, (s, st, k) in enumerate(zip(spatial, strides, kernel))
        ]
        plane = int(np.prod(out))
        start = Tensor.arange(n * c, device=x.device).reshape([n, c] + [1] * rank) * plane
        fn = max_unpool1d if rank == 1 else max_unpool2d
        y = fn(x, indices - start, kernel, strides, 0, out)
        if shape is not None and np.size(shape):
            extra = [t - o for t, o in zip(ints(shape)[2:], out)]
            if any(e < 0 for e in extra):
                raise node.error(f"output_shape {ints(shape)} is smaller than the unpooled {[n, c, *out]}")
            y = y.pad([w for e in reversed(extra) for w in (0, e)])
        return y

    return run
