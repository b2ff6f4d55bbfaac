"""``CubeTensor``: the cube backend's primitive, a strided view of a GPU buffer.

Views make layout ops free: ``permute``, ``expand`` (stride 0), ``flip`` (negative
strides), ``slice`` (offset and stepped strides) and ``reshape`` of a contiguous
tensor only build a new handle. Kernels read any view through its strides.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember.backend.cube.dtypes import Storage


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    step = 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


class CubeTensor:
    """A view ``(buffer, shape, strides, offset)`` of elements of one :class:`Storage`.

    ``bounds`` is ``(low, high)`` when the values of an int tensor are known to lie in
    that range (uploads, ``arange``, argmax, argsort): index checks then need no read-back.
    """

    __slots__ = ("buffer", "shape", "strides", "offset", "storage", "bounds", "__weakref__")

    def __init__(
        self,
        buffer: Any,
        shape: tuple[int, ...],
        storage: Storage,
        strides: tuple[int, ...] | None = None,
        offset: int = 0,
        bounds: tuple[int, int] | None = None,
    ) -> None:
        self.buffer = buffer
        self.shape = shape
        self.storage = storage
        self.strides = contiguous_strides(shape) if strides is None else strides
        self.offset = offset
        self.bounds = bounds

    @property
    def dtype(self) -> np.dtype:
        return self.storage.np

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def is_contiguous(self) -> bool:
        """Whether the view is the dense row-major layout of its buffer from offset 0."""
        if self.offset:
            return False
        step = 1
        for n, s in zip(reversed(self.shape), reversed(self.strides)):
            if n != 1 and s != step:
                return False
            step *= n
        return True

    def view(
        self, shape: tuple[int, ...], strides: tuple[int, ...], offset: int, keep_bounds: bool = True
    ) -> CubeTensor:
        return CubeTensor(self.buffer, shape, self.storage, strides, offset, self.bounds if keep_bounds else None)

    def __repr__(self) -> str:
        return f"CubeTensor(shape={list(self.shape)}, dtype={self.dtype}, strides={list(self.strides)}, offset={self.offset})"


def coalesce(shape: tuple[int, ...], *strides: tuple[int, ...]) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """``shape`` and each operand's strides with size-1 dims dropped and adjacent dims
    merged where every operand steps through them as one (TensorIterator's trick)."""
    dims = [i for i, n in enumerate(shape) if n != 1]
    if not dims:
        return (), [() for _ in strides]
    out_shape = [shape[dims[0]]]
    out_strides = [[s[dims[0]]] for s in strides]
    for i in dims[1:]:
        n = shape[i]
        if all(os[-1] == s[i] * n for os, s in zip(out_strides, strides)):
            out_shape[-1] *= n
            for os, s in zip(out_strides, strides):
                os[-1] = s[i]
        else:
            out_shape.append(n)
            for os, s in zip(out_strides, strides):
                os.append(s[i])
    return tuple(out_shape), [tuple(s) for s in out_strides]


def broadcast_strides(x: CubeTensor, shape: tuple[int, ...]) -> tuple[int, ...]:
    """``x``'s strides for reading it broadcast to ``shape`` (0 on stretched dims)."""
    lead = len(shape) - len(x.shape)
    strides = [0] * lead
    for n, s in zip(x.shape, x.strides):
        strides.append(0 if n == 1 else s)
    return tuple(strides)
