"""Indexing ops: gather/scatter, select, masks, argwhere, one-hot."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.backend.dtype import DType
from ember.backend.ops import BinaryOp
from ember.errors import DTypeError, ShapeError, ValueRangeError
from ember.tensor.checks import BOOL_NP, FLOAT_NP, INT_NP, as_scalar, check_device, promote_pair
from ember.tensor.ops.base import TensorOpsBase
from ember.tensor.ops.rank0 import rank0_as_vector
from ember.tensor.shape import broadcast_shapes, normalize_dim

if TYPE_CHECKING:
    from typing import Self


class IndexingOps(TensorOpsBase):
    """Ops that read or write values at positions given by index or mask tensors."""

    __slots__ = ()

    def _index_tensor(self, op: str, indices: Any) -> Self:
        if not isinstance(indices, self.__class__):
            indices = self.__class__.from_data(indices, device=self._device, dtype=DType.INT64)
        if indices._device is not self._device:
            check_device(op, self, indices)
        if indices._primitive.dtype not in INT_NP:
            raise DTypeError(f"ember: {op}: indices must be an int tensor, got {indices.dtype}")
        if indices.dtype is not DType.INT64:
            indices = indices.cast(DType.INT64)
        return indices

    @rank0_as_vector("dim")
    def gather(self, dim: int, indices: Any) -> Self:
        """``out[i][j] = self[i][indices[i][j]]`` along ``dim`` (``torch.gather``)."""
        shape = self._primitive.shape
        dim = normalize_dim("gather", dim, len(shape))
        indices = self._index_tensor("gather", indices)
        ishape = indices._primitive.shape
        if len(ishape) != len(shape) or any(ishape[d] > shape[d] for d in range(len(shape)) if d != dim):
            raise ShapeError(
                f"ember: gather: indices of shape {list(ishape)} must have the rank of the tensor "
                f"{list(shape)} and no larger dims except dim {dim}"
            )
        return self.__class__(self._device._backend.gather(self._primitive, dim, indices._primitive), self._device)

    @rank0_as_vector("dim")
    def select(self, dim: int, indices: Any) -> Self:
        """The slices at ``indices`` (rank 1) along ``dim`` (``torch.index_select``)."""
        shape = self._primitive.shape
        dim = normalize_dim("select", dim, len(shape))
        indices = self._index_tensor("select", indices)
        if len(indices._primitive.shape) != 1:
            raise ShapeError(f"ember: select: indices must have rank 1, got shape {list(indices._primitive.shape)}")
        return self.__class__(self._device._backend.select(self._primitive, dim, indices._primitive), self._device)

    index_select = select

    @rank0_as_vector("dim")
    def select_assign(self, dim: int, indices: Any, values: Any) -> Self:
        """A copy with ``values`` added to the slices at ``indices`` along ``dim``
        (``torch.index_add``); repeated indices accumulate."""
        shape = self._primitive.shape
        dim = normalize_dim("select_assign", dim, len(shape))
        indices = self._index_tensor("select_assign", indices)
        values = self._like(values, "select_assign")
        if len(indices._primitive.shape) != 1:
            raise ShapeError(f"ember: select_assign: indices must have rank 1, got {list(indices._primitive.shape)}")
        expected = shape[:dim] + indices._primitive.shape + shape[dim + 1 :]
        if values._primitive.shape != expected:
            raise ShapeError(
                f"ember: select_assign: values must have shape {list(expected)}, got {list(values._primitive.shape)}"
            )
        return self.__class__(
            self._device._backend.select_add(self._primitive, dim, indices._primitive, values._primitive), self._device
        )

    def _like(self, values: Any, op: str) -> Self:
        """``values`` as a tensor of this tensor's dtype and device."""
        if not isinstance(values, self.__class__):
            raise DTypeError(f"ember: {op}: values must be a Tensor, got {type(values).__name__}")
        if values._device is not self._device:
            check_device(op, self, values)
        if values._primitive.dtype != self._primitive.dtype:
            values = values.cast(self.dtype)
        return values

    def _mask(self, op: str, mask: Any) -> Self:
        if not isinstance(mask, self.__class__) or mask._primitive.dtype != BOOL_NP:
            raise DTypeError(f"ember: {op}: the mask must be a bool Tensor, got {mask!r:.80}")
        if mask._device is not self._device:
            check_device(op, self, mask)
        broadcast_shapes(op, self._primitive.shape, mask._primitive.shape)
        return mask

    def mask_where(self, mask: Any, value: Any) -> Self:
        """``value`` where ``mask`` is true, else ``self`` (shapes broadcast)."""
        mask = self._mask("mask_where", mask)
        if not isinstance(value, self.__class__):
            return self.mask_fill(mask, value)
        if value._device is not self._device:
            check_device("mask_where", self, value)
        a, b = self._primitive, value._primitive
        if a.dtype != b.dtype:
            a, b = promote_pair("mask_where", self, value)
        broadcast_shapes("mask_where", broadcast_shapes("mask_where", a.shape, b.shape), mask._primitive.shape)
        return self.__class__(self._device._backend.where(mask._primitive, b, a), self._device)

    def mask_fill(self, mask: Any, value: Any) -> Self:
        """``value`` (a scalar) where ``mask`` is true, else ``self``."""
        mask = self._mask("mask_fill", mask)
        value = as_scalar("mask_fill", value)
        p = self._primitive
        if p.dtype not in FLOAT_NP and isinstance(value, float):
            p = self._device._backend.cast(p, DType.FLOAT32)
        if p.dtype == BOOL_NP and not isinstance(value, bool):
            raise DTypeError(f"ember: mask_fill: a bool tensor takes a bool fill value, got {value!r}")
        return self.__class__(self._device._backend.where(mask._primitive, value, p), self._device)

    def masked_fill(self, mask: Any, value: Any) -> Self:
        """PyTorch's name for :meth:`mask_fill`: ``value`` (a scalar or a one-element
        tensor) where ``mask`` is true, else ``self``."""
        if isinstance(value, self.__class__):
            if value.num_elements() != 1:
                raise DTypeError(
                    f"ember: masked_fill: the value must be a scalar or a one-element tensor, got shape {value.dims()}; "
                    "for a tensor of values use x.mask_where(mask, values)"
                )
            return self.mask_where(
                mask, value.reshape(()).cast(self.dtype) if value.dtype != self.dtype else value.reshape(())
            )
        return self.mask_fill(mask, value)

    def where(self, mask: Any, other: Any) -> Self:
        """``self`` where ``mask`` is true, else ``other`` (as ``torch.where(mask, self, other)``)."""
        if isinstance(other, self.__class__):
            return other.mask_where(mask, self)
        mask = self._mask("where", mask)
        return self.mask_fill(mask.bool_not(), other)

    def argwhere(self) -> Self:
        """The ``[n, rank]`` int64 coordinates of nonzero (true) elements."""
        p = self._primitive
        mask = p if p.dtype == BOOL_NP else self._device._backend.binary(BinaryOp.NE, p, 0)
        return self.__class__(self._device._backend.argwhere(mask), self._device)

    def nonzero(self) -> list[Any]:
        """One rank-1 int64 tensor of coordinates per dim (Burn's ``nonzero``); an empty
        list when no element is nonzero, as Burn."""
        coords = self.argwhere()
        if coords._primitive.shape[0] == 0:
            return []
        return [coords[:, d] for d in range(len(self._primitive.shape))]

    def masked_select(self, mask: Any) -> Self:
        """The elements where ``mask`` (broadcasting with this tensor) is true, in order,
        as a rank-1 tensor (``torch.masked_select``, Burn's ``mask_select``; one sync)."""
        mask = self._mask("masked_select", mask)
        shape = broadcast_shapes("masked_select", self._primitive.shape, mask._primitive.shape)
        values = self.expand(shape) if self._primitive.shape != shape else self
        flat_mask = (mask.expand(shape) if mask._primitive.shape != shape else mask).reshape((-1,))
        return values.reshape((-1,))[flat_mask]

    mask_select = masked_select

    def take(self, dim_or_indices: Any, indices: Any = None) -> Self:
        """Burn's ``take(dim, indices)``: the slices at ``indices`` (any shape) along
        ``dim``, whose place the indices' dims take (``numpy.take`` with an axis). With
        one argument, ``torch.take(indices)``: elements of the flattened tensor, in the
        indices' shape. Negative indices count from the end."""
        if indices is None:
            flat = self.reshape((-1,))
            index = self._index_tensor("take", dim_or_indices)
            n = flat._primitive.shape[0]
            index = index.mask_where(index.lower_elem(0), index.add_scalar(n))
            return flat.select(0, index.reshape((-1,))).reshape(index._primitive.shape)
        shape = self._primitive.shape
        dim = normalize_dim("take", dim_or_indices, len(shape))
        index = self._index_tensor("take", indices)
        index = index.mask_where(index.lower_elem(0), index.add_scalar(shape[dim]))
        picked = self.select(dim, index.reshape((-1,)))
        return picked.reshape(shape[:dim] + index._primitive.shape + shape[dim + 1 :])

    def one_hot(self, num_classes: int) -> Self:
        """Class indices (an int tensor) as one-hot vectors in a new last dim (int64)."""
        return self.one_hot_fill(num_classes, 1, 0)

    def one_hot_fill(
        self, num_classes: int, on_value: Any = 1, off_value: Any = 0, dtype: Any = None, axis: int = -1
    ) -> Self:
        """One-hot with chosen values; float ``on``/``off`` values give float32. The class
        dim is put at ``axis`` of the result (Burn's ``one_hot_fill``; default last)."""
        if self._primitive.dtype not in INT_NP:
            raise DTypeError(f"ember: one_hot: needs an int tensor of class indices, got {self.dtype}")
        if num_classes <= 0:
            raise ValueRangeError(f"ember: one_hot: num_classes must be > 0, got {num_classes}")
        if self.num_elements():
            lo, hi = int(self.min().into_scalar()), int(self.max().into_scalar())
            if lo < 0 or hi >= num_classes:
                raise ValueRangeError(
                    f"ember: one_hot: class index {lo if lo < 0 else hi} is outside [0, {num_classes})"
                )
        classes = self.__class__.arange(num_classes, device=self._device)
        hot = self.unsqueeze_dim(-1).equal(classes)
        if dtype is None:
            float_values = isinstance(on_value, float) or isinstance(off_value, float)
            dtype = DType.FLOAT32 if float_values else DType.INT64
        dtype = DType.parse(dtype)
        on = self.__class__.full((), on_value, self._device, dtype)
        out = on.expand(hot._primitive.shape).mask_fill(hot.bool_not(), off_value)
        rank = len(out._primitive.shape)
        if not -rank <= axis < rank:
            raise ValueRangeError(f"ember: one_hot_fill: axis {axis} is outside the result's {rank} dims")
        return out if axis in (-1, rank - 1) else out.movedim(rank - 1, axis)
