"""``Shape`` and the shape arithmetic the tensor layer checks ops with."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ember.errors import IndexOutOfBoundsError, ShapeError


class Shape(tuple):
    """A tensor's shape: a tuple of dims that also compares equal to a list.

    >>> Shape([2, 3]).dims()
    [2, 3]
    """

    __slots__ = ()

    def __new__(cls, dims: Iterable[int] = ()) -> Shape:
        return tuple.__new__(cls, dims)

    def dims(self) -> list[int]:
        return list(self)

    def num_dims(self) -> int:
        return len(self)

    def num_elements(self) -> int:
        n = 1
        for d in self:
            n *= d
        return n

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            other = tuple(other)
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = tuple.__hash__

    def __repr__(self) -> str:
        return f"Shape({list(self)})"


def as_shape(op: str, shape: Any) -> tuple[int, ...]:
    """Validate a user-given shape (an int, or a sequence of ints >= 0)."""
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise ShapeError(f"ember: {op}: a shape is a list of ints, got {shape!r}") from None
    for d in dims:
        if isinstance(d, bool) or not hasattr(d, "__index__") or int(d) < 0:
            raise ShapeError(f"ember: {op}: shape {list(dims)} must hold non-negative ints, got {d!r}")
    return tuple(int(d) for d in dims)


#: The most bytes a numpy array may span; numpy refuses a shape past it even when
#: another dim is 0 (it multiplies the non-zero dims).
MAX_HOST_BYTES = 2**63 - 1


def check_addressable(op: str, shape: tuple[int, ...], itemsize: int) -> None:
    """Raise a ShapeError for a shape whose non-zero dims span more than
    :data:`MAX_HOST_BYTES` (numpy, which holds flex's values and every host copy,
    cannot make such an array, empty or not)."""
    n = 1
    for d in shape:
        if d:
            n *= d
    if n * itemsize > MAX_HOST_BYTES:
        raise ShapeError(
            f"ember: {op}: shape {list(shape)} cannot be represented: its non-zero dims multiply to {n:.3e} "
            f"elements of {itemsize} bytes, past the 2**63 - 1 bytes a host array can span (numpy refuses such a "
            "shape even when another dim is 0); use smaller dims"
        )


def numel(shape: Iterable[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def broadcast_shapes(op: str, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """numpy's broadcast of two shapes, or a ShapeError naming the op."""
    if a == b:
        return a
    n = max(len(a), len(b))
    pa = (1,) * (n - len(a)) + tuple(a)
    pb = (1,) * (n - len(b)) + tuple(b)
    out = []
    for da, db in zip(pa, pb):
        if da == db or db == 1:
            out.append(da)
        elif da == 1:
            out.append(db)
        else:
            raise ShapeError(
                f"ember: {op}: shapes {list(a)} and {list(b)} cannot be broadcast together "
                f"(dims must match or be 1, aligned from the right); reshape, unsqueeze or "
                f"expand an operand so that they line up"
            )
    return tuple(out)


def normalize_dim(op: str, dim: int, rank: int, *, extra: int = 0, wrap_scalar: bool = False) -> int:
    """A dim in ``[-rank-extra, rank+extra)`` as a non-negative index. With
    ``wrap_scalar``, a 0-d tensor takes dims 0 and -1 (PyTorch's rule: the tensor
    itself; see ``ember/tensor/ops/rank0.py``)."""
    if isinstance(dim, bool) or not hasattr(dim, "__index__"):
        raise IndexOutOfBoundsError(f"ember: {op}: dim must be an int, got {dim!r}")
    dim = int(dim)
    size = rank + extra
    if size == 0:
        if not wrap_scalar:
            raise IndexOutOfBoundsError(
                f"ember: {op}: a 0-d tensor has no dims (got dim {dim}); reshape it to shape [1] first"
            )
        size = 1
    if not -size <= dim < size:
        raise IndexOutOfBoundsError(
            f"ember: {op}: dim {dim} is out of range for a rank-{rank} tensor (valid: {-size} to {size - 1})"
        )
    return dim + size if dim < 0 else dim


def normalize_dims(op: str, dims: Iterable[int], rank: int, *, wrap_scalar: bool = False) -> tuple[int, ...]:
    dims = list(dims)
    out = tuple(normalize_dim(op, d, rank, wrap_scalar=wrap_scalar) for d in dims)
    if len(set(out)) != len(out):
        raise ShapeError(f"ember: {op}: dims {dims} repeat a dimension")
    return out
