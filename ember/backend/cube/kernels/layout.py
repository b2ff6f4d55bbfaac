"""Layout ops: free views (reshape of dense tensors, permute, flip, expand, slice)
and copy kernels (materialising a view, writing into a region for slice_assign/cat)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ember.backend.cube import ir
from ember.backend.cube.buffer import CubeTensor, broadcast_strides, contiguous_strides
from ember.backend.cube.kernels import elementwise

if TYPE_CHECKING:
    from ember.backend.cube.kernels.context import KernelContext


def is_dense(x: CubeTensor) -> bool:
    """Row-major strides (any offset): a reshape can stay a view."""
    step = 1
    for n, s in zip(reversed(x.shape), reversed(x.strides)):
        if n != 1 and s != step:
            return False
        step *= n
    return True


def copy(backend: KernelContext, x: CubeTensor) -> CubeTensor:
    """A new contiguous tensor with the values of the view ``x``."""
    out = elementwise.run(backend, ir.load(0, x.storage.compute), [x], x.storage, x.shape)
    out.bounds = x.bounds
    return out


def contiguous(backend: KernelContext, x: CubeTensor) -> CubeTensor:
    return x if x.is_contiguous() else copy(backend, x)


def reshape(backend: KernelContext, x: CubeTensor, shape: tuple[int, ...]) -> CubeTensor:
    shape = tuple(int(n) for n in shape)
    if -1 in shape:
        known = math.prod(n for n in shape if n != -1)
        shape = tuple(x.size // known if n == -1 else n for n in shape)
    if not is_dense(x):
        x = copy(backend, x)
    return x.view(shape, contiguous_strides(shape), x.offset)


def permute(x: CubeTensor, axes: Sequence[int]) -> CubeTensor:
    return x.view(tuple(x.shape[a] for a in axes), tuple(x.strides[a] for a in axes), x.offset)


def flip(x: CubeTensor, axes: Sequence[int]) -> CubeTensor:
    strides, offset = list(x.strides), x.offset
    for a in axes:
        if x.shape[a] > 0:
            offset += (x.shape[a] - 1) * strides[a]
            strides[a] = -strides[a]
    return x.view(x.shape, tuple(strides), offset)


def expand(x: CubeTensor, shape: tuple[int, ...]) -> CubeTensor:
    return x.view(tuple(shape), broadcast_strides(x, tuple(shape)), x.offset)


def slice_view(x: CubeTensor, slices: Sequence[tuple[int, int, int]]) -> CubeTensor:
    shape, strides, offset = list(x.shape), list(x.strides), x.offset
    for d, (start, stop, step) in enumerate(slices):
        n = len(range(start, stop, step))
        shape[d] = n
        if n:
            offset += start * strides[d]
        strides[d] *= step
    return x.view(tuple(shape), tuple(strides), offset)


def write(backend: KernelContext, dest: CubeTensor, value: CubeTensor) -> None:
    """Copy ``value`` (broadcast to ``dest``'s shape) into the region view ``dest``."""
    elementwise.run(backend, ir.load(0, value.storage.compute), [value], dest.storage, dest.shape, dest=dest)


def slice_assign(backend: KernelContext, x: CubeTensor, slices, value: CubeTensor) -> CubeTensor:
    out = copy(backend, x)
    out.bounds = None
    write(backend, slice_view(out, slices), value)
    return out


def cat(backend: KernelContext, xs: Sequence[CubeTensor], dim: int) -> CubeTensor:
    first = xs[0]
    shape = list(first.shape)
    shape[dim] = sum(x.shape[dim] for x in xs)
    out = backend.empty(tuple(shape), first.storage)
    start = 0
    for x in xs:
        n = x.shape[dim]
        if n and x.size:
            region = [(0, m, 1) for m in shape]
            region[dim] = (start, start + n, 1)
            write(backend, slice_view(out, region), x)
        start += n
    known = [x.bounds for x in xs if x.bounds is not None]
    if xs and len(known) == len(xs):  # every part's value range is known
        out.bounds = (min(b[0] for b in known), max(b[1] for b in known))
    return out
