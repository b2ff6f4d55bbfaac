"""The indexing ops of the CUDA backend (gather, scatter-add, select, select-add,
argwhere, and the general scatter), as CUDA templates with index checks; mixed into
:class:`~ember.backend.cuda.backend.CudaBackend`."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.backend.base import Backend
from ember.backend.cuda import templates
from ember.backend.cuda.codegen import BLOCK, MAX_GRID
from ember.backend.cuda.dtypes import dtype_of
from ember.backend.cuda.tensor import CudaTensor
from ember.backend.dtype import DType
from ember.backend.ops import BinaryOp, CumulativeOp, ReduceOp
from ember.errors import IndexOutOfBoundsError

_I64 = np.dtype(np.int64)
_F32 = np.dtype(np.float32)


def _grid(n: int) -> int:
    """Blocks for ``n`` threads, capped at the grid limit (kernels loop over the rest)."""
    return min(max(-(-n // BLOCK), 1), MAX_GRID)


def _ptr(t: CudaTensor) -> np.uint64:
    return np.uint64(t.ptr)


class CudaIndexing(Backend):
    """Gather, scatter and select on CUDA tensors (see the module docstring)."""

    if TYPE_CHECKING:  # the CudaBackend helpers these ops use

        def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> CudaTensor: ...
        def contiguous(self, x: CudaTensor) -> CudaTensor: ...
        def _template(self, key: Any, build: Callable[..., Any], grid: int, args: tuple) -> None: ...
        def _map(
            self,
            build: Any,
            inputs: list[CudaTensor],
            shape: tuple[int, ...],
            out_dtype: np.dtype,
            scalars: Sequence[tuple[Any, np.dtype]] = (),
            tag: Any = None,
        ) -> CudaTensor: ...
        def _lines(self, x: CudaTensor, dim: int) -> tuple[CudaTensor, int, int, int]: ...

    def _check(self, op: str, indices: CudaTensor, size: int, dim: int) -> None:
        if indices.size == 0:
            return
        flat = self.reshape(indices, (indices.size,))
        lo = int(self.to_numpy(self.reduce(ReduceOp.MIN, flat, 0))[0])
        hi = int(self.to_numpy(self.reduce(ReduceOp.MAX, flat, 0))[0])
        if lo < 0 or hi >= size:
            raise IndexOutOfBoundsError(
                f"ember: {op}: index {lo if lo < 0 else hi} is out of bounds for dim {dim} of size {size} "
                f"(indices must lie in [0, {size}))"
            )

    def gather(self, x: CudaTensor, dim: int, indices: CudaTensor) -> CudaTensor:
        self._check("gather", indices, x.shape[dim], dim)
        # Trim x to the index tensor's other dims, then see both as [outer, len, inner].
        slices = tuple((0, indices.shape[d] if d != dim else x.shape[d], 1) for d in range(len(x.shape)))
        x = self.slice(x, slices)
        idx, outer, m, inner = self._lines(indices, dim)
        x = self.contiguous(x)
        out = self.empty(indices.shape, x.dtype)
        if out.size:
            d = dtype_of(x.dtype)
            length = x.shape[dim]
            self._template(
                ("gather", d),
                lambda: templates.gather(d),
                _grid(out.size),
                (
                    _ptr(x),
                    _ptr(idx),
                    _ptr(out),
                    np.int64(outer),
                    np.int64(m),
                    np.int64(inner),
                    np.int64(length * inner),
                    np.int64(inner),
                    np.int64(1),
                    np.int64(0),
                ),
            )
        return out

    def _atomic_dtype(self, dtype: np.dtype) -> np.dtype:
        d = dtype_of(dtype)
        if d in (DType.FLOAT32, DType.FLOAT64, DType.INT32, DType.INT64):
            return dtype
        return _F32 if d.is_float else _I64

    def _accumulator(self, x: CudaTensor) -> tuple[np.dtype, CudaTensor]:
        """The dtype atomic adds run in for ``x`` and a fresh copy of ``x`` in it, for
        scatter_add and select_add to add into."""
        wide = self._atomic_dtype(x.dtype)
        out = self._map(
            lambda e, ld, sc: e.make("cast", None, (ld[0],), wide) if wide != x.dtype else ld[0], [x], x.shape, wide
        )
        return wide, out

    def scatter_add(self, x: CudaTensor, dim: int, indices: CudaTensor, values: CudaTensor) -> CudaTensor:
        self._check("scatter", indices, x.shape[dim], dim)
        wide, out = self._accumulator(x)
        vals = self.contiguous(self.cast(self.slice(values, tuple((0, n, 1) for n in indices.shape)), dtype_of(wide)))
        idx, outer, m, inner = self._lines(indices, dim)
        if idx.size:
            d = dtype_of(wide)
            # ``out`` keeps x's full shape: its inner extent may exceed the index tensor's.
            if tuple(indices.shape[dim + 1 :]) != tuple(x.shape[dim + 1 :]) or tuple(indices.shape[:dim]) != tuple(
                x.shape[:dim]
            ):
                return self._scatter_general(x, dim, indices, values)
            self._template(
                ("scatter", d),
                lambda: templates.scatter_add(d),
                _grid(idx.size),
                (
                    _ptr(out),
                    _ptr(idx),
                    _ptr(vals),
                    np.int64(outer),
                    np.int64(m),
                    np.int64(x.shape[dim]),
                    np.int64(inner),
                ),
            )
        return self.cast(out, dtype_of(x.dtype))

    def _scatter_general(self, x: CudaTensor, dim: int, indices: CudaTensor, values: CudaTensor) -> CudaTensor:
        """scatter_add where the index tensor is smaller than ``x`` in other dims: into a
        zero tensor of the index tensor's extent, then added to the matching region."""
        region_shape = tuple(indices.shape[d] if d != dim else x.shape[d] for d in range(len(x.shape)))
        zeros = self.full(region_shape, 0, dtype_of(x.dtype))
        part = self.scatter_add(zeros, dim, indices, values)
        slices = tuple((0, n, 1) for n in region_shape)
        summed = self.binary(BinaryOp.ADD, self.slice(x, slices), part)
        return self.slice_assign(x, slices, summed)

    def select(self, x: CudaTensor, dim: int, indices: CudaTensor) -> CudaTensor:
        self._check("select", indices, x.shape[dim], dim)
        x = self.contiguous(x)
        outer, length, inner = math.prod(x.shape[:dim]), x.shape[dim], math.prod(x.shape[dim + 1 :])
        m = indices.shape[0]
        idx = self.contiguous(indices)
        out = self.empty(x.shape[:dim] + (m,) + x.shape[dim + 1 :], x.dtype)
        if out.size:
            d = dtype_of(x.dtype)
            self._template(
                ("select", d),
                lambda: templates.select(d),
                _grid(out.size),
                (
                    _ptr(x),
                    _ptr(idx),
                    _ptr(out),
                    np.int64(outer),
                    np.int64(m),
                    np.int64(inner),
                    np.int64(length * inner),
                    np.int64(inner),
                    np.int64(1),
                    np.int64(0),
                ),
            )
        return out

    def select_add(self, x: CudaTensor, dim: int, indices: CudaTensor, values: CudaTensor) -> CudaTensor:
        self._check("select_assign", indices, x.shape[dim], dim)
        wide, out = self._accumulator(x)
        vals = self.contiguous(self.cast(values, dtype_of(wide)))
        outer, length, inner = math.prod(x.shape[:dim]), x.shape[dim], math.prod(x.shape[dim + 1 :])
        m = indices.shape[0]
        idx = self.contiguous(indices)
        if vals.size:
            d = dtype_of(wide)
            self._template(
                ("select_add", d),
                lambda: templates.select_add(d),
                _grid(vals.size),
                (_ptr(out), _ptr(idx), _ptr(vals), np.int64(outer), np.int64(m), np.int64(length), np.int64(inner)),
            )
        return self.cast(out, dtype_of(x.dtype))

    def argwhere(self, x: CudaTensor) -> CudaTensor:
        rank = len(x.shape)
        n = x.size
        if n == 0:
            return self.empty((0, rank), _I64)
        mask = self.contiguous(x)
        pos = self.cumulative(CumulativeOp.CUMSUM, self.reshape(self.cast(mask, DType.INT64), (n,)), 0)
        count = int(self.to_numpy(self.slice(pos, ((n - 1, n, 1),)))[0])
        out = self.empty((count, rank), _I64)
        if count and rank:
            self._template(
                ("argwhere", rank),
                lambda: templates.argwhere(rank),
                _grid(n),
                (_ptr(mask), _ptr(pos), _ptr(out), np.int64(n), *(np.int64(s) for s in x.shape)),
            )
        return out
