"""Sequence operators: SequenceEmpty, SequenceConstruct, SequenceAt, SequenceLength,
SequenceInsert, SequenceErase, ConcatFromSequence, SplitToSequence; and the optional
values: Optional, OptionalHasElement, OptionalGetElement.

A sequence is a Python list of ember Tensors held in one slot of the program; these
operators run at every ``forward`` (never folded), and the tensors they gather or split
go through ember's ops (differentiable)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.onnx.ops.common import axis, ints, scalar
from ember.onnx.ops.registry import Node, op
from ember.tensor import Tensor


def _position(node: Node, seq: list[Any], given: Any, default: int, inserting: bool = False) -> int:
    n = len(seq)
    if given is None or not np.size(given):
        return default
    p = int(scalar(given))
    p = p + n if p < 0 else p
    if not 0 <= p <= (n if inserting else n - 1):
        raise node.error(f"position {int(scalar(given))} is out of range for a sequence of {n} tensor(s)")
    return p


@op("SequenceEmpty", since=11, sequence=True)
def sequence_empty(node: Node) -> Callable[..., Any]:
    node.uses("dtype")  # the element type of a sequence ember holds as a list (any dtype)
    return lambda: []


@op("SequenceConstruct", since=11, sequence=True)
def sequence_construct(node: Node) -> Callable[..., Any]:
    return lambda *xs: list(xs)


@op("SequenceAt", host=(1,), since=11, sequence=True)
def sequence_at(node: Node) -> Callable[..., Any]:
    return lambda seq, p: seq[_position(node, seq, p, 0)]


@op("SequenceLength", since=11, sequence=True)
def sequence_length(node: Node) -> Callable[..., Any]:
    def run(seq: list[Tensor]) -> Tensor:
        device = seq[0].device if seq else None
        return Tensor.from_data(np.array(len(seq), np.int64), device=device)

    return run


@op("SequenceInsert", host=(2,), since=11, sequence=True)
def sequence_insert(node: Node) -> Callable[..., Any]:
    def run(seq: list[Tensor], x: Tensor, p: Any = None) -> list[Tensor]:
        at = _position(node, seq, p, len(seq), inserting=True)
        return [*seq[:at], x, *seq[at:]]

    return run


@op("SequenceErase", host=(1,), since=11, sequence=True)
def sequence_erase(node: Node) -> Callable[..., Any]:
    def run(seq: list[Tensor], p: Any = None) -> list[Tensor]:
        if not seq:
            raise node.error("cannot erase from an empty sequence")
        at = _position(node, seq, p, len(seq) - 1)
        return [*seq[:at], *seq[at + 1 :]]

    return run


@op("ConcatFromSequence", since=11, sequence=True)
def concat_from_sequence(node: Node) -> Callable[..., Any]:
    a = int(node.attr("axis"))
    new_axis = bool(node.attr("new_axis", 0))

    def run(seq: list[Tensor]) -> Tensor:
        if not seq:
            raise node.error("cannot concatenate an empty sequence")
        if new_axis:
            return Tensor.stack(seq, axis(node, a, seq[0].rank + 1))
        return Tensor.cat(seq, axis(node, a, seq[0].rank))

    return run


@op("SplitToSequence", host=(1,), since=11, sequence=True)
def split_to_sequence(node: Node) -> Callable[..., Any]:
    a = int(node.attr("axis", 0))
    keep = bool(node.attr("keepdims", 1))

    def run(x: Tensor, split: Any = None) -> list[Tensor]:
        d = axis(node, a, x.rank)
        n = x.dims()[d]
        if split is None or (not np.size(split) and np.ndim(split)):
            pieces = x.split_with_sizes([1] * n, d) if n else []
            return pieces if keep else [p.squeeze_dim(d) for p in pieces]
        if np.ndim(split) == 0:  # a chunk size: the last piece may be smaller
            size = int(scalar(split))
            if size <= 0:
                raise node.error(f"split {size} must be positive")
            sizes = [min(size, n - i) for i in range(0, n, size)]
        else:
            sizes = ints(split)
            if sum(sizes) != n:
                raise node.error(f"the split sizes {sizes} do not add up to the dim's {n}")
        return list(x.split_with_sizes(sizes, d))

    return run


# ---------------------------------------------------------------------- optional values
# An optional value is its element (a tensor or a sequence) or ``None`` when empty.
@op("Optional", since=15, sequence=True)
def optional(node: Node) -> Callable[..., Any]:
    node.uses("type")  # the element type of an empty optional: ember's None needs none
    return lambda x=None: x


@op("OptionalHasElement", since=15, sequence=True)
def optional_has_element(node: Node) -> Callable[..., Any]:
    def run(x: Any = None) -> Tensor:
        device = x.device if isinstance(x, Tensor) else x[0].device if isinstance(x, list) and x else None
        return Tensor.from_data(np.array(x is not None), device=device)

    return run


@op("OptionalGetElement", since=15, sequence=True)
def optional_get_element(node: Node) -> Callable[..., Any]:
    def run(x: Any = None) -> Any:
        if x is None:
            raise node.error("the optional value is empty")
        return x

    return run
