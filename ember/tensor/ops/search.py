"""Searching and counting, with PyTorch's names and semantics: ``searchsorted``,
``bucketize``, ``isin``, ``unique``, ``unique_consecutive``, ``histc``.

``searchsorted`` is a binary search written over ``gather``: ``ceil(log2(M + 1))``
rounds of one gather, one comparison and two ``where`` each, on every backend.
``unique`` sorts and keeps the first element of each run (``argwhere`` gives the run
starts: the one place the result's size is read back to the host, as in PyTorch).
With ``dim``, ``unique``/``unique_consecutive`` compare whole slices: the slices are
ordered on the host (numpy's lexicographic row sort; the result's size depends on
the data, as in PyTorch) and the kept slices are gathered on the tensor's device.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.backend.dtype import DType
from ember.errors import DTypeError, ShapeError, ValueRangeError
from ember.tensor.checks import BOOL_NP, FLOAT_NP
from ember.tensor.ops.base import TensorOpsBase
from ember.tensor.shape import normalize_dim

if TYPE_CHECKING:
    from typing import Self


def _search(seq: Any, values: Any, right: bool) -> Any:
    """For ``seq`` ``[..., M]`` sorted along its last dim and ``values`` ``[..., K]``
    (the same leading dims): the int64 insertion points ``[..., K]``."""
    m = seq._primitive.shape[-1]
    lo = values.zeros_like().int()
    hi = lo.add_scalar(m)
    if m == 0:
        return lo
    for _ in range(max(1, math.ceil(math.log2(m + 1)))):
        mid = lo.add(hi).floor_div(2)
        probe = seq.gather(len(seq._primitive.shape) - 1, mid.clamp_max(m - 1))
        go_right = probe.lower_equal(values) if right else probe.lower(values)
        go_right = go_right.bool_and(mid.lower_elem(m))
        lo = lo.mask_where(go_right, mid.add_scalar(1))
        hi = mid.mask_where(go_right, hi)
    return lo


class SearchOps(TensorOpsBase):
    """``searchsorted``, ``bucketize``, ``isin``, ``unique``, ``unique_consecutive``, ``histc``."""

    __slots__ = ()

    def searchsorted(
        self,
        values: Any,
        *,
        right: bool = False,
        side: str | None = None,
        sorter: Any = None,
        out_int32: bool = False,
    ) -> Self:
        """The indices where ``values`` would be inserted into this tensor (sorted along
        its last dim) to keep it sorted: the first such place, or with ``right=True``
        (``side="right"``) the last (``torch.searchsorted(self, values)``). A 1-D
        sequence serves values of any shape; otherwise the leading dims must match.
        ``sorter`` holds indices that sort an unsorted sequence.

        >>> from ember import Device, Tensor
        >>> seq = Tensor.from_floats([1.0, 3.0, 5.0, 7.0], device=Device.flex())
        >>> seq.searchsorted(Tensor.from_floats([3.0, 6.0, 9.0], device=Device.flex())).tolist()
        [1, 3, 4]
        """
        if side is not None:
            if side not in ("left", "right"):
                raise ValueRangeError(f"ember: searchsorted: side must be 'left' or 'right', got {side!r}")
            if right and side == "left":
                raise ValueRangeError("ember: searchsorted: side='left' contradicts right=True; pass one of them")
            right = side == "right"
        seq = self
        if sorter is not None:
            sorter = self._index_tensor("searchsorted", sorter)
            if tuple(sorter._primitive.shape) != tuple(seq._primitive.shape):
                raise ShapeError(
                    f"ember: searchsorted: sorter {list(sorter._primitive.shape)} must have the sequence's shape "
                    f"{list(seq._primitive.shape)}"
                )
            seq = seq.gather(len(seq._primitive.shape) - 1, sorter)
        scalar = not isinstance(values, self.__class__)
        v = self.__class__.full((), values, self._device, self.dtype) if scalar else values
        if v._primitive.dtype != seq._primitive.dtype:
            common = DType.FLOAT64 if DType.FLOAT64.np in (v._primitive.dtype, seq._primitive.dtype) else None
            if v._primitive.dtype in FLOAT_NP or seq._primitive.dtype in FLOAT_NP:
                target = common or (v.dtype if v._primitive.dtype in FLOAT_NP else seq.dtype)
            else:
                target = DType.INT64
            v, seq = v.cast(target), seq.cast(target)
        if seq._primitive.dtype == BOOL_NP:
            v, seq = v.int(), seq.int()
        if len(seq._primitive.shape) == 0:
            raise ShapeError("ember: searchsorted: the sorted sequence needs at least one dim")
        if len(seq._primitive.shape) == 1:
            shape = list(v._primitive.shape)
            flat = v.reshape([1, max(1, math.prod(shape))]) if shape else v.reshape([1, 1])
            out = _search(seq.reshape([1, seq._primitive.shape[0]]), flat, right).reshape(shape)
        else:
            if tuple(v._primitive.shape[:-1]) != tuple(seq._primitive.shape[:-1]):
                raise ShapeError(
                    f"ember: searchsorted: the values {list(v._primitive.shape)} must share the leading dims of the "
                    f"sorted sequence {list(seq._primitive.shape)} (or the sequence must be 1-D)"
                )
            out = _search(seq, v, right)
        return out.cast(DType.INT32) if out_int32 else out

    def bucketize(self, boundaries: Any, *, right: bool = False, out_int32: bool = False) -> Self:
        """The bucket of each element between the 1-D sorted ``boundaries``
        (``torch.bucketize``): ``boundaries.searchsorted(self, right=right)``."""
        if not isinstance(boundaries, self.__class__) or len(boundaries._primitive.shape) != 1:
            raise ShapeError("ember: bucketize: boundaries must be a 1-D Tensor")
        return boundaries.searchsorted(self, right=right, out_int32=out_int32)

    def isin(self, test_elements: Any, *, assume_unique: bool = False, invert: bool = False) -> Self:
        """Bool: whether each element occurs in ``test_elements`` (a Tensor or a scalar),
        negated with ``invert`` (``torch.isin``)."""
        if not isinstance(test_elements, self.__class__):
            test_elements = self.__class__.full((1,), test_elements, self._device, self.dtype)
        pool = test_elements.reshape([test_elements.num_elements()])
        if pool.num_elements() == 0:
            out = self.zeros_like().bool() if self._primitive.dtype != BOOL_NP else self.bool_and(self.bool_not())
            return out.bool_not() if invert else out
        x, pool = (self, pool) if pool._primitive.dtype == self._primitive.dtype else (self.float(), pool.float())
        if x._primitive.dtype == BOOL_NP:
            x, pool = x.int(), pool.int()
        ordered = pool.sort()
        at = ordered.searchsorted(x).clamp_max(ordered.num_elements() - 1)
        shape = list(x._primitive.shape)
        found = ordered.select(0, at.reshape([max(1, math.prod(shape))])).reshape(shape).equal(x)
        return found.bool_not() if invert else found

    def unique_consecutive(
        self, return_inverse: bool = False, return_counts: bool = False, dim: int | None = None
    ) -> Any:
        """The flattened tensor with each run of equal consecutive elements kept once
        (``torch.unique_consecutive`` with ``dim=None``); with ``return_inverse`` the
        index of each input element's run (the input's shape), with ``return_counts``
        each run's length. Returns a tensor, or a tuple when either is asked for. With
        ``dim``, runs of equal consecutive slices along ``dim`` (inverse and counts per slice)."""
        if dim is not None:
            return self._unique_dim("unique_consecutive", dim, False, return_inverse, return_counts)
        values, inverse, counts = self._runs(self.reshape([self.num_elements()]), return_inverse, return_counts)
        if inverse is not None:
            inverse = inverse.reshape(list(self._primitive.shape))
        return _pack(values, inverse if return_inverse else None, counts if return_counts else None)

    def _runs(self, flat: Any, need_inverse: bool, need_counts: bool) -> tuple[Any, Any, Any]:
        n = flat._primitive.shape[0]
        if n == 0:
            empty = self.__class__.zeros([0], self._device, DType.INT64)
            return flat, empty, empty
        key = flat.int() if flat._primitive.dtype == BOOL_NP else flat
        change = key.narrow(0, 1, n - 1).not_equal(key.narrow(0, 0, n - 1))
        first = self.__class__.full((1,), True, self._device, DType.BOOL)
        starts_mask = self.__class__.cat([first, change], 0)
        starts = starts_mask.argwhere().reshape([-1])
        values = flat.select(0, starts)
        inverse = starts_mask.int().cumsum(0).sub_scalar(1) if need_inverse else None
        counts = None
        if need_counts:
            end = self.__class__.full((1,), n, self._device, DType.INT64)
            counts = self.__class__.cat([starts.narrow(0, 1, starts._primitive.shape[0] - 1), end], 0).sub(starts)
        return values, inverse, counts

    def unique(
        self, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False, dim: int | None = None
    ) -> Any:
        """The distinct elements, sorted (``torch.unique`` with ``dim=None``); with
        ``return_inverse`` each input element's index into them (the input's shape),
        with ``return_counts`` how often each occurs.

        >>> from ember import Device, Tensor
        >>> x = Tensor.from_ints([3, 1, 3, 2, 1], device=Device.flex())
        >>> [t.tolist() for t in x.unique(return_inverse=True, return_counts=True)]
        [[1, 2, 3], [2, 0, 2, 1, 0], [2, 1, 2]]

        With ``dim``, the distinct slices along ``dim`` in lexicographic order; the
        inverse and counts are per slice (shape ``[size of dim]`` and ``[slices kept]``):

        >>> rows = Tensor.from_ints([[1, 2], [0, 5], [1, 2]], device=Device.flex())
        >>> [t.tolist() for t in rows.unique(dim=0, return_inverse=True, return_counts=True)]
        [[[0, 5], [1, 2]], [1, 0, 1], [1, 2]]
        """
        if dim is not None:
            return self._unique_dim("unique", dim, True, return_inverse, return_counts)
        flat = self.reshape([self.num_elements()])
        order = flat.argsort()
        values, inverse, counts = self._runs(flat.select(0, order), return_inverse, return_counts)
        if return_inverse:
            placed = inverse.zeros_like().scatter(0, order, inverse, "add")  # inverse[order[i]] = run of i
            inverse = placed.reshape(list(self._primitive.shape))
        return _pack(values, inverse if return_inverse else None, counts if return_counts else None)

    def _unique_dim(self, op: str, dim: int, sort: bool, return_inverse: bool, return_counts: bool) -> Any:
        """``unique``/``unique_consecutive`` over the slices along ``dim``: the slice order
        is found on the host, the kept slices are gathered on the device."""
        shape = tuple(self._primitive.shape)
        dim = normalize_dim(op, dim, len(shape))
        n = shape[dim]
        if self._primitive.dtype.kind == "c" and sort:
            raise DTypeError(f"ember: {op}: complex slices have no order; compare view_as_real(x) instead")
        rows = np.moveaxis(np.asarray(self._device._backend.to_numpy(self._primitive)), dim, 0).reshape(
            n, math.prod(shape) // n if n else 0
        )
        if n == 0:
            first = inverse = counts = np.zeros(0, np.int64)
        elif rows.shape[1] == 0:  # empty slices are all equal
            first, inverse, counts = np.zeros(1, np.int64), np.zeros(n, np.int64), np.array([n], np.int64)
        elif sort:
            _, first, inverse, counts = np.unique(
                rows, axis=0, return_index=True, return_inverse=True, return_counts=True
            )
        else:
            starts = np.concatenate([[True], np.any(rows[1:] != rows[:-1], axis=1)])
            first = np.flatnonzero(starts)
            inverse = np.cumsum(starts) - 1
            counts = np.diff(np.append(first, n))
        cls, device = self.__class__, self._device
        values = self.select(dim, cls.from_data(np.asarray(first, np.int64).reshape(-1), device, DType.INT64))
        return _pack(
            values,
            cls.from_data(np.asarray(inverse, np.int64).reshape(-1), device, DType.INT64) if return_inverse else None,
            cls.from_data(np.asarray(counts, np.int64).reshape(-1), device, DType.INT64) if return_counts else None,
        )

    def histc(self, bins: int = 100, min: float = 0, max: float = 0) -> Self:
        """A histogram of ``bins`` equal-width bins over ``[min, max]`` (the data's range
        when both are 0); elements outside are ignored (``torch.histc``). Float result."""
        if self._primitive.dtype not in FLOAT_NP:
            raise DTypeError(f"ember: histc: needs a float tensor, got {self.dtype}; convert with .float()")
        if isinstance(bins, bool) or not isinstance(bins, int) or bins <= 0:
            raise ValueRangeError(f"ember: histc: bins must be a positive int, got {bins!r}")
        flat = self.reshape([self.num_elements()])
        lo, hi = float(min), float(max)
        if lo == hi and flat.num_elements():
            lo, hi = float(flat.min().into_scalar()), float(flat.max().into_scalar())
        if lo == hi:
            lo, hi = lo - 1, hi + 1
        if lo > hi or not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueRangeError(f"ember: histc: needs finite min <= max, got [{lo}, {hi}]")
        inside = flat.greater_equal_elem(lo).bool_and(flat.lower_equal_elem(hi))
        index = flat.sub_scalar(lo).mul_scalar(bins).div_scalar(hi - lo).floor().int().clamp(0, bins - 1)
        index = index.mask_fill(inside.bool_not(), 0)
        ones = inside.cast(self.dtype)
        return self.__class__.zeros([bins], self._device, self.dtype).scatter(0, index, ones, "add")


def _pack(values: Any, inverse: Any, counts: Any) -> Any:
    if inverse is None and counts is None:
        return values
    out = [values]
    if inverse is not None:
        out.append(inverse)
    if counts is not None:
        out.append(counts)
    return tuple(out)
