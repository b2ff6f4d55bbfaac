"""Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1,
ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceSumSquare.

The axes are an attribute before opset 18 (ReduceSum: before 13) and an input after."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.backend.dtype import DType
from ember.onnx.ops.common import axes, ints
from ember.onnx.ops.registry import Node, numpy_op, op
from ember.tensor import Tensor


def _sum(x: Tensor, d: list[int]) -> Tensor:
    return x.sum_dims(d)


def _log_sum_exp(x: Tensor, d: list[int]) -> Tensor:
    peak = x.max_dims(d).detach()  # any constant shift gives the same value and gradient
    peak = peak.where(peak.is_finite(), peak.zeros_like())
    return (x - peak).exp().sum_dims(d).log() + peak


_REDUCE: dict[str, Callable[[Tensor, list[int]], Tensor]] = {
    "ReduceSum": _sum,
    "ReduceMean": lambda x, d: x.mean_dims(d),
    "ReduceMax": lambda x, d: x.max_dims(d),
    "ReduceMin": lambda x, d: x.min_dims(d),
    "ReduceProd": lambda x, d: x.prod_dims(d),
    "ReduceL1": lambda x, d: x.abs().sum_dims(d),
    "ReduceL2": lambda x, d: (x * x).sum_dims(d).sqrt(),
    "ReduceLogSum": lambda x, d: x.sum_dims(d).log(),
    "ReduceLogSumExp": _log_sum_exp,
    "ReduceSumSquare": lambda x, d: (x * x).sum_dims(d),
}

_NP_REDUCE: dict[str, Callable[..., np.ndarray]] = {
    "ReduceSum": np.sum,
    "ReduceMean": np.mean,
    "ReduceMax": np.max,
    "ReduceMin": np.min,
    "ReduceProd": np.prod,
}


def _axes_of(node: Node, given: Any, rank: int) -> list[int] | None:
    """The reduced dims; ``None`` means the input passes through unchanged."""
    inputs_since = 13 if node.op_type == "ReduceSum" else 18
    chosen = (ints(given) if given is not None else []) if node.version >= inputs_since else node.ints("axes", [])
    if not chosen:
        if node.attr("noop_with_empty_axes", 0):
            return None
        return list(range(rank))
    return sorted(set(axes(node, chosen, rank)))


_EMPTY = {"ReduceMax", "ReduceMin", "ReduceLogSumExp", "ReduceLogSum"}


def _empty_reduction(name: str, x: Tensor, shape: list[int]) -> Tensor:
    """ONNX's value of a reduction over an empty set: the identity of the reduction
    (-inf for ReduceMax and ReduceLogSumExp, +inf for ReduceMin, the type's lowest or
    highest value for ints, false or true for bools)."""
    lowest = name != "ReduceMin"
    if x.dtype is DType.BOOL:
        value: Any = not lowest
    elif x.is_float():
        value = float("-inf") if lowest else float("inf")
    else:
        info = np.iinfo(x.dtype.np)
        value = int(info.min if lowest else info.max)
    return Tensor.full(shape, value, device=x.device, dtype=x.dtype)


def _reduce_builder(name: str) -> Callable[[Node], Callable[..., Any]]:
    fn = _REDUCE[name]

    def build(node: Node) -> Callable[..., Any]:
        keep = bool(node.attr("keepdims", 1))
        node.uses("axes", "noop_with_empty_axes")

        def run(x: Tensor, given: Any = None) -> Tensor:
            shape = x.dims()
            d = _axes_of(node, given, len(shape))
            if d is None:
                return x
            if not shape:  # a rank-0 input: the reduction of one value
                return fn(x.reshape([1]), [0]).reshape([])
            if name in _EMPTY and any(shape[i] == 0 for i in d):
                out = _empty_reduction(name, x, [1 if i in d else n for i, n in enumerate(shape)])
            else:
                out = fn(x, d)
            return out if keep else out.reshape([n for i, n in enumerate(shape) if i not in d])

        return run

    return build


def _np_reduce_builder(name: str) -> Callable[[Node], Callable[..., Any]]:
    fn = _NP_REDUCE[name]

    def build(node: Node) -> Callable[..., Any]:
        keep = bool(node.attr("keepdims", 1))
        node.uses("axes", "noop_with_empty_axes")

        def run(x: np.ndarray, given: Any = None) -> np.ndarray:
            d = _axes_of(node, given, x.ndim)
            if d is None:
                return x
            return np.asarray(fn(x, axis=tuple(d), keepdims=keep)).astype(x.dtype)

        return run

    return build


for _name in _REDUCE:
    op(_name, host=(1,))(_reduce_builder(_name))
for _name in _NP_REDUCE:
    numpy_op(_name)(_np_reduce_builder(_name))
