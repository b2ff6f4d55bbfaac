"""Small helpers shared by the operator builders."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.onnx.ops.registry import Node
from ember.tensor import Tensor


def dims(x: Any) -> list[int]:
    """The shape of a Tensor or a numpy array, as a list."""
    return x.dims() if isinstance(x, Tensor) else list(np.shape(x))


def ints(array: Any) -> list[int]:
    """A host array (or None) as a list of Python ints."""
    if array is None:
        return []
    return [int(v) for v in np.asarray(array).reshape(-1)]


def scalar(array: Any) -> Any:
    """A one-element host array as a Python scalar."""
    return np.asarray(array).reshape(-1)[0].item()


def axis(node: Node, value: int, rank: int) -> int:
    """``value`` as a dim in ``[0, rank)`` (negative counts from the end)."""
    out = value + rank if value < 0 else value
    if not 0 <= out < max(rank, 1):
        raise node.error(f"axis {value} is out of range for rank {rank}")
    return out


def axes(node: Node, values: Sequence[int], rank: int) -> list[int]:
    return [axis(node, int(v), rank) for v in values]


def scalar_operand(node: Node, i: int, other: int) -> Any:
    """Input ``i`` as a Python scalar when it is a one-element constant that broadcasting
    against input ``other`` cannot widen (so ``x op scalar`` keeps ``x``'s shape); else ``None``."""
    value = node.const(i)
    if value is None or value.size != 1 or node.const(other) is not None:
        return None
    if value.ndim:
        rank = node.rank(other)
        if rank is None or rank < value.ndim:
            return None
    if value.dtype.kind not in "fiub":
        return None
    return value.reshape(-1)[0].item()


def host_array(value: Any, dtype: Any = None) -> np.ndarray:
    """A Tensor or array as a numpy array (a Tensor is read back: a sync point)."""
    if isinstance(value, Tensor):
        value = value.to_numpy()
    array = np.asarray(value)
    return array if dtype is None else array.astype(dtype)
