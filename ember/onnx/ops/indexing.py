"""Indexing and creation operators: Gather, GatherElements, GatherND, ScatterElements,
ScatterND, Constant, ConstantOfShape, Range, EyeLike, OneHot, TopK, ArgMax, ArgMin,
CumSum, NonZero, Einsum."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ember.onnx.dtypes import ember_dtype
from ember.onnx.ops.common import axis, ints, scalar
from ember.onnx.ops.registry import Node, numpy_op, op
from ember.tensor import Tensor


def _wrap(indices: Tensor, n: int) -> Tensor:
    """Negative indices counted from the end (ONNX allows ``[-n, n)``)."""
    return indices.where(indices.greater_equal_elem(0), indices + n)


# ---------------------------------------------------------------------- Gather
@op("Gather")
def gather(node: Node) -> Callable[..., Any]:
    a = int(node.attr("axis", 0))
    const = node.const(1)
    if const is not None and const.ndim == 0:  # one slice, the dim removed
        index = int(const)
        return lambda x, _i: x.select_dim(axis(node, a, x.rank), index)

    def run(x: Tensor, indices: Tensor) -> Tensor:
        return x.take(axis(node, a, x.rank), indices)

    return run


@numpy_op("Gather")
def _np_gather(node: Node) -> Callable[..., Any]:
    a = int(node.attr("axis", 0))
    return lambda x, indices: np.take(x, indices.astype(np.int64), axis=axis(node, a, x.ndim))


@op("GatherElements")
def gather_elements(node: Node) -> Callable[..., Any]:
    a = int(node.attr("axis", 0))

    def run(x: Tensor, indices: Tensor) -> Tensor:
        d = axis(node, a, x.rank)
        return x.gather(d, _wrap(indices.cast("int64"), x.dims()[d]))

    return run


def _linear_index(node: Node, indices: Tensor, shape: list[int], k: int) -> Tensor:
    """``indices [..., k]`` into the first ``k`` dims of ``shape`` as flat positions ``[...]``."""
    if not 1 <= k <= len(shape):
        raise node.error(f"the indices' last dim ({k}) must be between 1 and the data's rank ({len(shape)})")
    last = indices.rank - 1
    flat: Tensor | None = None
    for j in range(k):
        part = _wrap(indices.narrow(last, j, 1), shape[j]) * math.prod(shape[j + 1 : k])
        flat = part if flat is None else flat + part
    assert flat is not None  # k >= 1
    return flat.reshape(indices.dims()[:-1])


@op("GatherND")
def gather_nd(node: Node) -> Callable[..., Any]:
    if int(node.attr("batch_dims", 0)):
        raise node.error("batch_dims other than 0 are not supported")

    def run(x: Tensor, indices: Tensor) -> Tensor:
        shape = x.dims()
        k = indices.dims()[-1]
        flat = _linear_index(node, indices.cast("int64"), shape, k)
        rows = x.reshape([math.prod(shape[:k])] + shape[k:])
        return rows.take(0, flat)

    return run


_REDUCTIONS = {"none": "assign", "add": "add", "mul": "mul", "max": "max", "min": "min"}


@op(["ScatterElements", "Scatter"])  # Scatter (opsets 9-10) is ScatterElements' old name
def scatter_elements(node: Node) -> Callable[..., Any]:
    a = int(node.attr("axis", 0))
    update = _REDUCTIONS.get(node.attr("reduction", "none"))
    if update is None:
        raise node.error(f"reduction {node.attr('reduction')!r} is not supported")

    def run(x: Tensor, indices: Tensor, updates: Tensor) -> Tensor:
        d = axis(node, a, x.rank)
        return x.scatter(d, _wrap(indices.cast("int64"), x.dims()[d]), updates, update=update)

    return run


@op("ScatterND")
def scatter_nd(node: Node) -> Callable[..., Any]:
    update = _REDUCTIONS.get(node.attr("reduction", "none"))
    if update is None:
        raise node.error(f"reduction {node.attr('reduction')!r} is not supported")

    def run(x: Tensor, indices: Tensor, updates: Tensor) -> Tensor:
        shape = x.dims()
        k = indices.dims()[-1]
        rest = shape[k:]
        flat = _linear_index(node, indices.cast("int64"), shape, k).reshape([-1])
        m = flat.dims()[0]
        rows = x.reshape([math.prod(shape[:k])] + rest)
        values = updates.reshape([m] + rest)
        where = flat.reshape([m] + [1] * len(rest)).expand([m] + rest) if rest else flat
        return rows.scatter(0, where, values, update=update).reshape(shape)

    return run


# ---------------------------------------------------------------------- creation
def constant_value(node: Node) -> np.ndarray:
    """The value of a Constant node, from whichever attribute holds it."""
    attrs = node.attrs
    node.uses(*attrs)  # exactly one value attribute (the model check ensures it); read below
    if "value" in attrs:
        return np.asarray(attrs["value"])
    if "value_float" in attrs:
        return np.array(attrs["value_float"], dtype=np.float32)
    if "value_floats" in attrs:
        return np.array(attrs["value_floats"], dtype=np.float32)
    if "value_int" in attrs:
        return np.array(attrs["value_int"], dtype=np.int64)
    if "value_ints" in attrs:
        return np.array(attrs["value_ints"], dtype=np.int64)
    raise node.error(
        f"holds no supported value attribute (has {', '.join(attrs) or 'none'}; strings and sparse "
        "tensors are not supported)"
    )


@op("Constant")
def constant(node: Node) -> Callable[..., Any]:
    value = constant_value(node)
    return lambda: value


numpy_op("Constant")(constant)


@op("ConstantOfShape", host=(0,))
def constant_of_shape(node: Node) -> Callable[..., Any]:
    value = node.attr("value")
    fill = np.zeros([1], np.float32) if value is None else np.asarray(value).reshape(-1)

    def run(shape: np.ndarray) -> np.ndarray:
        return np.full(ints(shape), fill[0], dtype=fill.dtype)

    return run


numpy_op("ConstantOfShape")(constant_of_shape)


@op("Range", host=(0, 1, 2))
def range_(node: Node) -> Callable[..., Any]:
    def run(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
        s, e, d = scalar(start), scalar(limit), scalar(delta)
        n = max(math.ceil((e - s) / d), 0)
        return (
            (np.arange(n, dtype=np.float64) * d + s).astype(np.asarray(start).dtype)
            if start.dtype.kind == "f"
            else (np.arange(n, dtype=np.int64) * d + s).astype(np.asarray(start).dtype)
        )

    return run


numpy_op("Range")(range_)


@op("EyeLike")
def eye_like(node: Node) -> Callable[..., Any]:
    k = int(node.attr("k", 0))
    to = node.attr("dtype")

    def run(x: Tensor) -> Tensor:
        n, m = x.dims()
        rows = Tensor.arange(n, device=x.device).unsqueeze_dim(1)
        cols = Tensor.arange(m, device=x.device).unsqueeze_dim(0)
        dtype = x.dtype if to is None else ember_dtype(to, node.label)
        return (cols - rows).equal_elem(k).cast(dtype)

    return run


@op("OneHot", host=(1, 2))
def one_hot(node: Node) -> Callable[..., Any]:
    a = int(node.attr("axis", -1))

    def run(indices: Tensor, depth: np.ndarray, values: np.ndarray) -> Tensor:
        n = int(scalar(depth))
        off, on = values.reshape(-1)[0].item(), values.reshape(-1)[1].item()
        idx = _wrap((indices.trunc() if indices.is_float() else indices).cast("int64"), n)
        # ONNX: an index outside [-depth, depth) gives a row of off values.
        inside = idx.greater_equal_elem(0).bool_and(idx.lower_elem(n))
        hot = idx.where(inside, idx.zeros_like()).one_hot(n) * inside.cast("int64").unsqueeze_dim(-1)
        out = (hot * (on - off) + off) if values.dtype.kind != "b" else hot.bool()
        out = out.cast(Tensor.from_data(values[:1], device=indices.device).dtype)
        return out.movedim(-1, axis(node, a, indices.rank + 1))

    return run


# ---------------------------------------------------------------------- order statistics
@op("TopK", host=(1,))
def top_k(node: Node) -> Callable[..., Any]:
    a = int(node.attr("axis", -1))
    largest = bool(node.attr("largest", 1))

    def run(x: Tensor, k: np.ndarray) -> tuple[Tensor, Tensor]:
        return x.topk_with_indices(int(scalar(k)), axis(node, a, x.rank), largest)

    return run


def _arg_builder(largest: bool) -> Callable[[Node], Callable[..., Any]]:
    def build(node: Node) -> Callable[..., Any]:
        a = int(node.attr("axis", 0))
        keep = bool(node.attr("keepdims", 1))
        last = bool(node.attr("select_last_index", 0))

        def run(x: Tensor) -> Tensor:
            d = axis(node, a, x.rank)
            src = x.flip([d]) if last else x
            out = src.argmax(d) if largest else src.argmin(d)
            if last:
                out = (x.dims()[d] - 1) - out
            return out if keep else out.squeeze_dim(d)

        return run

    return build


op("ArgMax")(_arg_builder(True))
op("ArgMin")(_arg_builder(False))


@op("CumSum", host=(1,))
def cum_sum(node: Node) -> Callable[..., Any]:
    exclusive, reverse = bool(node.attr("exclusive", 0)), bool(node.attr("reverse", 0))

    def run(x: Tensor, a: np.ndarray) -> Tensor:
        d = axis(node, int(scalar(a)), x.rank)
        src = x.flip([d]) if reverse else x
        out = src.cumsum(d)
        if exclusive:
            out = out - src
        out = out.flip([d]) if reverse else out
        return out if out.dtype == x.dtype else out.cast(x.dtype)  # ONNX keeps int32 int32

    return run


@op("CumProd", host=(1,), since=26)
def cum_prod(node: Node) -> Callable[..., Any]:
    exclusive, reverse = bool(node.attr("exclusive", 0)), bool(node.attr("reverse", 0))

    def run(x: Tensor, a: np.ndarray) -> Tensor:
        d = axis(node, int(scalar(a)), x.rank)
        src = x.flip([d]) if reverse else x
        n = src.dims()[d]
        if exclusive and n:  # the product of the values before: a one, then all but the last
            src = Tensor.cat([src.narrow(d, 0, 1).ones_like(), src.narrow(d, 0, n - 1)], d)
        out = src.cumprod(d)
        out = out.flip([d]) if reverse else out
        return out if out.dtype == x.dtype else out.cast(x.dtype)

    return run


@op("NonZero", data_dependent=True)
def non_zero(node: Node) -> Callable[..., Any]:
    def run(x: Tensor) -> Tensor:
        coords = x.argwhere()  # [n, rank]
        return coords.permute([1, 0]) if coords.rank == 2 else coords.reshape([x.rank, 0])

    return run


@numpy_op("NonZero")
def _np_non_zero(node: Node) -> Callable[..., Any]:
    return lambda x: np.array(np.nonzero(x), dtype=np.int64).reshape(np.ndim(x), -1)


@op("Einsum")
def einsum(node: Node) -> Callable[..., Any]:
    equation = node.attr("equation", "").replace(" ", "")
    return lambda *xs: Tensor.einsum(equation, *xs)


@numpy_op("Einsum")
def _np_einsum(node: Node) -> Callable[..., Any]:
    equation = node.attr("equation", "").replace(" ", "")
    return lambda *xs: np.einsum(equation, *xs)
