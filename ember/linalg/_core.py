from __future__ import annotations

from typing import Any

from ember.backend.dtype import DType
from ember.backend.ops import LinalgOp
from ember.errors import DTypeError, RankError, ShapeError
from ember.tensor import Tensor
from ember.tensor.checks import check_device

_FLOATS = (DType.FLOAT32, DType.FLOAT64)
_COMPLEX = (DType.COMPLEX64, DType.COMPLEX128)


def check_matrix(op: str, a: Any, *, square: bool = False, name: str = "A") -> Tensor:
    """``a`` as a float or complex tensor of matrices ``[..., m, n]`` (square when asked)."""
    if not isinstance(a, Tensor):
        raise DTypeError(f"ember: linalg.{op}: {name} must be an ember Tensor, got {type(a).__name__}")
    shape = a.dims()
    if len(shape) < 2:
        raise RankError(
            f"ember: linalg.{op}: {name} must be a matrix or a batch of matrices [..., m, n], "
            f"got shape {shape}; reshape a vector to [n, 1] or [1, n]"
        )
    if a.dtype not in _FLOATS + _COMPLEX:
        raise DTypeError(
            f"ember: linalg.{op}: {name} has dtype {a.dtype.name.lower()}; the decompositions take "
            f"float32, float64, complex64 or complex128 matrices: cast first with {name.lower()}.float() "
            "(or .cast('float64'))"
        )
    if square and shape[-1] != shape[-2]:
        raise ShapeError(
            f"ember: linalg.{op}: {name} must be a batch of square matrices [..., n, n], got shape {shape}"
        )
    return a


def check_operand(op: str, a: Tensor, b: Any, name: str = "B") -> Tensor:
    """``b`` as a tensor on ``a``'s device with ``a``'s dtype (float or complex)."""
    if not isinstance(b, Tensor):
        raise DTypeError(f"ember: linalg.{op}: {name} must be an ember Tensor, got {type(b).__name__}")
    check_device(f"linalg.{op}", a, b)
    if b.dtype not in _FLOATS + _COMPLEX:
        raise DTypeError(
            f"ember: linalg.{op}: {name} has dtype {b.dtype.name.lower()}; cast it to A's "
            f"({a.dtype.name.lower()}) with .cast({a.dtype.name.lower()!r})"
        )
    if b.dtype != a.dtype:
        raise DTypeError(
            f"ember: linalg.{op}: A is {a.dtype.name.lower()} but {name} is {b.dtype.name.lower()}; "
            f"cast one of them so they match"
        )
    return b


def check_batch(op: str, a: Tensor, b: Tensor) -> None:
    """``a`` and ``b``'s batch dims (all but the last two) must broadcast."""
    sa, sb = a.dims()[:-2], b.dims()[:-2]
    for x, y in zip(reversed(sa), reversed(sb)):
        if x != y and x != 1 and y != 1:
            raise ShapeError(f"ember: linalg.{op}: the batch dims of A {a.dims()} and B {b.dims()} do not broadcast")


def run(op: LinalgOp, tensors: tuple[Tensor, ...], options: tuple = ()) -> list[Tensor]:
    """``Backend.linalg`` on the tensors' device."""
    device = tensors[0]._device
    outs = device._backend.linalg(op, tuple(t._primitive for t in tensors), options)
    return [Tensor(o, device) for o in outs]


def mt(x: Tensor) -> Tensor:
    """The matrix transpose (last two dims swapped)."""
    return x.swap_dims(-1, -2)


def mh(x: Tensor) -> Tensor:
    """The conjugate transpose (the transpose of a real matrix)."""
    return x.swap_dims(-1, -2).conj() if x.dtype.is_complex else x.swap_dims(-1, -2)
