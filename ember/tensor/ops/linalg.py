"""Products written over ``matmul``: ``einsum`` and the named products PyTorch users
reach for (``outer``, ``tensordot``, ``cross``, ``trace``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ember.errors import ShapeError
from ember.tensor.ops.base import TensorOpsBase
from ember.tensor.ops.einsum import einsum
from ember.tensor.shape import normalize_dim, normalize_dims, numel

if TYPE_CHECKING:
    from typing import Self


class LinalgOps(TensorOpsBase):
    """``einsum`` and named products (mixed into ``Tensor``)."""

    __slots__ = ()

    @staticmethod
    def einsum(equation: str, *operands: Any) -> Any:
        """Einstein summation (see :func:`ember.tensor.ops.einsum.einsum`)."""
        return einsum(equation, *operands)

    def outer(self, other: Any) -> Self:
        """The outer product of two rank-1 tensors, ``[n, m]``."""
        if len(self._primitive.shape) != 1 or not hasattr(other, "_primitive") or len(other._primitive.shape) != 1:
            raise ShapeError("ember: outer: needs two rank-1 tensors")
        return self.unsqueeze_dim(1).mul(other.unsqueeze_dim(0))

    def trace(self) -> Self:
        """The sum of the main diagonal of a matrix, shape ``[1]``."""
        if len(self._primitive.shape) != 2:
            raise ShapeError(f"ember: trace: needs a matrix, got shape {list(self._primitive.shape)}")
        return self.diagonal().sum()

    def cross(self, other: Any, dim: int = -1) -> Self:
        """The cross product of 3-vectors along ``dim`` (shapes broadcast)."""
        dim = normalize_dim("cross", dim, len(self._primitive.shape))
        if self._primitive.shape[dim] != 3 or other._primitive.shape[dim - len(self._primitive.shape)] != 3:
            raise ShapeError(f"ember: cross: dim {dim} must have size 3 in both operands")
        a = [self.narrow(dim, i, 1) for i in range(3)]
        b = [other.narrow(dim - len(self._primitive.shape), i, 1) for i in range(3)]
        parts = [
            a[1].mul(b[2]).sub(a[2].mul(b[1])),
            a[2].mul(b[0]).sub(a[0].mul(b[2])),
            a[0].mul(b[1]).sub(a[1].mul(b[0])),
        ]
        return self.__class__.cat(parts, dim)

    def tensordot(self, other: Any, dims: int | Sequence[Sequence[int]] = 2) -> Self:
        """The sum of products over the last ``dims`` dims of ``self`` and the first of
        ``other`` (or the given pairs of dims), as ``torch.tensordot``."""
        ra, rb = len(self._primitive.shape), len(other._primitive.shape)
        if isinstance(dims, int):
            da, db = list(range(ra - dims, ra)), list(range(dims))
        else:
            da, db = list(normalize_dims("tensordot", dims[0], ra)), list(normalize_dims("tensordot", dims[1], rb))
        if [self._primitive.shape[d] for d in da] != [other._primitive.shape[d] for d in db]:
            raise ShapeError(f"ember: tensordot: contracted dims {da} and {db} differ in size")
        keep_a = [d for d in range(ra) if d not in da]
        keep_b = [d for d in range(rb) if d not in db]
        k = numel(self._primitive.shape[d] for d in da)
        left = self.permute(keep_a + da).reshape((numel(self._primitive.shape[d] for d in keep_a), k))
        right = other.permute(db + keep_b).reshape((k, numel(other._primitive.shape[d] for d in keep_b)))
        shape = tuple(self._primitive.shape[d] for d in keep_a) + tuple(other._primitive.shape[d] for d in keep_b)
        return left.matmul(right).reshape(shape)
