"""Operators whose output shape depends on the input's values: Compress and Unique.

The positions they keep are found on the host (a read-back); the values are then
gathered with ember's ``take``, so the outputs stay differentiable with respect to the
input."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.onnx.ops.common import axis
from ember.onnx.ops.registry import Node, numpy_op, op
from ember.tensor import Tensor


@op("Compress", host=(1,), data_dependent=True)
def compress(node: Node) -> Callable[..., Any]:
    a = node.attr("axis")

    def run(x: Any, condition: np.ndarray) -> Any:
        flat = a is None
        data = x.reshape([-1]) if flat and isinstance(x, Tensor) else np.reshape(x, -1) if flat else x
        d = 0 if flat else axis(node, int(a), len(np.shape(data)) if not isinstance(data, Tensor) else data.rank)
        keep = np.nonzero(np.asarray(condition, bool).reshape(-1))[0]
        size = data.dims()[d] if isinstance(data, Tensor) else np.shape(data)[d]
        if keep.size and keep[-1] >= size:
            raise node.error(f"the condition keeps position {int(keep[-1])} of a dim of {size}")
        if isinstance(data, Tensor):
            return data.take(d, Tensor.from_data(keep.astype(np.int64), device=data.device))
        return np.take(data, keep, axis=d)

    return run


numpy_op("Compress")(compress)


@op("Unique", data_dependent=True)
def unique(node: Node) -> Callable[..., Any]:
    a = node.attr("axis")
    ordered = bool(node.attr("sorted", 1))
    wanted = len(node.outputs)

    def run(x: Any) -> Any:
        tensor = isinstance(x, Tensor)
        values = x.to_numpy() if tensor else np.asarray(x)
        flat = a is None
        data = values.reshape(-1) if flat else values
        d = 0 if flat else axis(node, int(a), values.ndim)
        _, first, inverse, counts = np.unique(data, return_index=True, return_inverse=True, return_counts=True, axis=d)
        inverse = inverse.reshape(-1)
        if not ordered:  # in order of first occurrence
            order = np.argsort(first, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(order.size)
            first, counts, inverse = first[order], counts[order], rank[inverse]
        index = first.astype(np.int64)
        if tensor:
            source = x.reshape([-1]) if flat else x
            y: Any = source.take(d, Tensor.from_data(index, device=x.device))
            extra: list[Any] = [Tensor.from_data(v.astype(np.int64), device=x.device) for v in (index, inverse, counts)]
        else:
            y = np.take(data, index, axis=d)
            extra = [v.astype(np.int64) for v in (index, inverse, counts)]
        out = [y, *extra][:wanted]
        return out[0] if wanted == 1 else tuple(out)

    return run


numpy_op("Unique")(unique)
