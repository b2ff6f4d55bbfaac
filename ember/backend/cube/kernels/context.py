"""What a cube kernel needs from its backend: :class:`KernelContext`.

The kernels take this small protocol instead of :class:`~ember.backend.cube.backend.CubeBackend`,
so they depend on the runtime, the kernel cache and a few backend ops, not on the
whole backend (which imports every kernel). ``CubeBackend`` satisfies it; the
type checker verifies that in ``cube/backend.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

    from ember.backend.cube.buffer import CubeTensor
    from ember.backend.cube.cache import KernelCache
    from ember.backend.cube.dtypes import Storage
    from ember.backend.cube.runtime import Runtime
    from ember.backend.dtype import DType
    from ember.backend.ops import CumulativeOp, ReduceOp


class KernelContext(Protocol):
    """The device, the compiled-kernel cache, allocation and the ops kernels compose."""

    @property
    def runtime(self) -> Runtime:
        """The wgpu device, its queue and buffer pool (opened on first use)."""
        ...

    @property
    def cache(self) -> KernelCache:
        """Compiled pipelines by kernel key."""
        ...

    plans: dict[Any, Any]
    """Elementwise launch plans by operand layout (see ``kernels/elementwise.py``)."""

    def storage(self, dtype: DType) -> Storage: ...

    def storage_f32(self) -> Storage: ...

    def empty(self, shape: tuple[int, ...], storage: Storage) -> CubeTensor: ...

    def to_numpy(self, x: CubeTensor) -> np.ndarray: ...

    def cast(self, x: CubeTensor, dtype: DType) -> CubeTensor: ...

    def matmul(self, a: CubeTensor, b: CubeTensor) -> CubeTensor: ...

    def reduce(self, op: ReduceOp, x: CubeTensor, dim: int) -> CubeTensor: ...

    def cumulative(self, op: CumulativeOp, x: CubeTensor, dim: int) -> CubeTensor: ...
