"""``CudaTensor``: the cuda backend's primitive, a strided view of device memory.

The layout ops (``permute``, ``expand``, ``flip``, ``slice``, and ``reshape`` where
the strides allow) only make a new handle; kernels read every operand through its
:class:`~ember.backend.kernel.views.View` (the same views the fusion IR uses).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.backend.kernel.views import View


class CudaTensor:
    """``mem`` (a device allocation, kept alive by this handle) seen through ``view``."""

    __slots__ = ("mem", "view", "dtype", "__weakref__")

    def __init__(self, mem: Any, view: View, dtype: np.dtype) -> None:
        self.mem = mem
        self.view = view
        self.dtype = dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.view.shape

    @property
    def size(self) -> int:
        return self.view.size

    @property
    def ptr(self) -> int:
        """The address of the allocation (element 0 of the buffer, not of the view)."""
        return int(self.mem.ptr)

    def with_view(self, view: View) -> CudaTensor:
        return CudaTensor(self.mem, view, self.dtype)

    def is_contiguous(self) -> bool:
        return self.view.offset == 0 and self.view.is_contiguous()

    def __repr__(self) -> str:
        v = self.view
        return f"CudaTensor(shape={list(v.shape)}, dtype={self.dtype}, strides={list(v.strides)}, offset={v.offset})"
