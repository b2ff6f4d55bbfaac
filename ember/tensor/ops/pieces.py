"""Cutting, differencing and placing, with PyTorch's (and Burn's) names: ``diff``,
``tensor_split``, ``slice_dim``, ``put``, ``masked_scatter``, ``logical_not``.
Each is a composite of slices, ``cat``, ``select`` and ``scatter``, so autodiff and
every backend run it unchanged."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ember.errors import DTypeError, ShapeError, ValueRangeError
from ember.tensor.checks import BOOL_NP
from ember.tensor.ops.base import TensorOpsBase
from ember.tensor.shape import normalize_dim

if TYPE_CHECKING:
    from typing import Self


class PiecesOps(TensorOpsBase):
    """``diff``, ``tensor_split``, ``slice_dim``, ``put``, ``masked_scatter``, ``logical_not``."""

    __slots__ = ()

    def diff(self, n: int = 1, dim: int = -1, prepend: Any = None, append: Any = None) -> Self:
        """The ``n``-th forward difference along ``dim`` (``torch.diff``), after putting
        ``prepend`` and ``append`` before and after; bool tensors give ``!=``.

        >>> from ember import Device, Tensor
        >>> Tensor.from_ints([1, 4, 9, 16], device=Device.flex()).diff().tolist()
        [3, 5, 7]
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueRangeError(f"ember: diff: n must be an int >= 0, got {n!r}")
        rank = len(self._primitive.shape)
        if rank == 0:
            raise ShapeError("ember: diff: needs at least one dim, got a scalar")
        dim = normalize_dim("diff", dim, rank)
        parts = []
        for extra in (prepend, self, append):
            if extra is None:
                continue
            if not isinstance(extra, self.__class__):
                shape = list(self._primitive.shape)
                shape[dim] = 1
                extra = self.__class__.full(tuple(shape), extra, self._device, self.dtype)
            parts.append(extra)
        x = self.__class__.cat(parts, dim) if len(parts) > 1 else self
        for _ in range(n):
            length = x._primitive.shape[dim]
            if length == 0:
                break
            later, earlier = x.narrow(dim, 1, length - 1), x.narrow(dim, 0, length - 1)
            x = later.not_equal(earlier) if x._primitive.dtype == BOOL_NP else later.sub(earlier)
        return x

    def tensor_split(self, indices_or_sections: Any, dim: int = 0) -> list[Self]:
        """Views along ``dim``: ``sections`` nearly equal parts (the first ``size % sections``
        one longer), or the parts between the given split indices (``torch.tensor_split``).

        >>> from ember import Device, Tensor
        >>> [p.tolist() for p in Tensor.arange(7, device=Device.flex()).tensor_split(3)]
        [[0, 1, 2], [3, 4], [5, 6]]
        """
        rank = len(self._primitive.shape)
        dim = normalize_dim("tensor_split", dim, rank)
        size = self._primitive.shape[dim]
        if isinstance(indices_or_sections, self.__class__):
            indices_or_sections = indices_or_sections.tolist()
        if isinstance(indices_or_sections, int) and not isinstance(indices_or_sections, bool):
            sections = indices_or_sections
            if sections <= 0:
                raise ValueRangeError(f"ember: tensor_split: sections must be > 0, got {sections}")
            base, extra = divmod(size, sections)
            bounds, start = [], 0
            for i in range(sections - 1):
                start += base + (1 if i < extra else 0)
                bounds.append(start)
        elif isinstance(indices_or_sections, Sequence):
            bounds = [int(i) for i in indices_or_sections]
        else:
            raise DTypeError(
                f"ember: tensor_split: expects an int or a sequence of ints, got {type(indices_or_sections).__name__}"
            )
        out, start = [], 0
        for end in [*bounds, size]:
            lo = min(max(start + size if start < 0 else start, 0), size)
            hi = min(max(end + size if end < 0 else end, 0), size)
            out.append(self.narrow(dim, lo, max(hi - lo, 0)))
            start = end
        return out

    def slice_dim(self, dim: int, spec: Any) -> Self:
        """This tensor cut along one dim (Burn's ``slice_dim``): ``spec`` is an index, a
        ``slice`` (steps allowed, negative ones too), a ``range`` or a ``(start, end)`` pair."""
        rank = len(self._primitive.shape)
        dim = normalize_dim("slice_dim", dim, rank)
        if isinstance(spec, range):
            spec = slice(spec.start, spec.stop, spec.step)
        elif isinstance(spec, tuple) and len(spec) == 2:
            spec = slice(spec[0], spec[1])
        elif isinstance(spec, int) and not isinstance(spec, bool):
            n = self._primitive.shape[dim]
            i = spec + n if spec < 0 else spec
            if not 0 <= i < n:
                raise ValueRangeError(f"ember: slice_dim: index {spec} is outside dim {dim} of size {n}")
            spec = slice(i, i + 1)
        if not isinstance(spec, slice):
            raise DTypeError(f"ember: slice_dim: expects an int, slice, range or (start, end), got {spec!r}")
        key: list[Any] = [slice(None)] * rank
        key[dim] = spec
        return self[tuple(key)]

    def put(self, index: Any, source: Any, accumulate: bool = False) -> Self:
        """A copy with ``source``'s elements written at the flat positions ``index`` of
        this tensor (negative positions count from the end), or added with
        ``accumulate`` (``torch.Tensor.put``)."""
        index = self._index_tensor("put", index)
        if not isinstance(source, self.__class__):
            raise DTypeError("ember: put: source must be a Tensor")
        count = index.num_elements()
        if source.num_elements() != count:
            raise ShapeError(
                f"ember: put: source has {source.num_elements()} elements but index has {count}; give one per index"
            )
        n = self.num_elements()
        flat_index = index.reshape([count])
        flat_index = flat_index.mask_where(flat_index.lower_elem(0), flat_index.add_scalar(n))
        flat = self.reshape([n])
        values = source.reshape([count]).cast(self.dtype)
        out = flat.scatter(0, flat_index, values, "add" if accumulate else "assign")
        return out.reshape(list(self._primitive.shape))

    def masked_scatter(self, mask: Any, source: Any) -> Self:
        """A copy with the positions where ``mask`` (bool, broadcast to this shape) is
        true filled, in order, from the leading elements of ``source``
        (``torch.Tensor.masked_scatter``). Differentiable for both."""
        if not isinstance(mask, self.__class__) or mask._primitive.dtype != BOOL_NP:
            raise DTypeError("ember: masked_scatter: mask must be a bool Tensor")
        if not isinstance(source, self.__class__):
            raise DTypeError("ember: masked_scatter: source must be a Tensor")
        shape = list(self._primitive.shape)
        mask = mask.expand(shape)
        n = max(1, math.prod(shape))
        flat_mask = mask.reshape([n])
        position = flat_mask.int().cumsum(0).sub_scalar(1).clamp(0, max(source.num_elements() - 1, 0))
        if source.num_elements() == 0:
            return self
        taken = source.reshape([source.num_elements()]).cast(self.dtype).select(0, position).reshape(shape)
        return self.mask_where(mask, taken)

    def logical_not(self) -> Self:
        """Bool: true where this tensor is zero (``torch.logical_not``; any dtype)."""
        if self._primitive.dtype == BOOL_NP:
            return self.bool_not()
        return self.equal_elem(0)

    def logical_and(self, other: Any) -> Self:
        """Bool: both nonzero (``torch.logical_and``; any dtypes)."""
        return _truth(self).bool_and(_truth(other))

    def logical_or(self, other: Any) -> Self:
        """Bool: either nonzero (``torch.logical_or``; any dtypes)."""
        return _truth(self).bool_or(_truth(other))

    def logical_xor(self, other: Any) -> Self:
        """Bool: exactly one nonzero (``torch.logical_xor``; any dtypes)."""
        return _truth(self).bool_xor(_truth(other))


def _truth(x: Any) -> Any:
    if not hasattr(x, "_primitive"):
        raise DTypeError(f"ember: logical ops take Tensors, got {type(x).__name__}")
    return x if x._primitive.dtype == BOOL_NP else x.not_equal_elem(0)
