"""``make_cuda_backend``: the backend behind ``Device.cuda(index)``."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ember.backend.cuda.backend import CudaBackend


def make_cuda_backend(index: int) -> tuple[CudaBackend, str]:
    """A cuda backend on device ``index`` and the body of its device's repr (Burn's
    ``Cube(Cuda(CudaDevice { index: 0 }))``). The CUDA runtime opens now, so a missing
    driver, GPU or CuPy raises :class:`ember.errors.BackendUnavailableError` here,
    naming the fix."""
    from ember.backend.cuda.backend import CudaBackend
    from ember.backend.cuda.runtime import CudaRuntime

    runtime = CudaRuntime(index)
    return CudaBackend(index, runtime), f"Cube(Cuda(CudaDevice {{ index: {index} }}))"
