"""Matmul through cuBLAS (``cublasGemmStridedBatchedEx``, via CuPy's bindings).

float32 and float64 multiply in their own precision (TF32 is off unless
``allow_tf32`` is set on the backend's handle, as in PyTorch); float16 and bfloat16
multiply on tensor cores with float32 accumulation. Integer and bool products run
the template kernel of :func:`ember.backend.cuda.templates.matmul_int`
(cuBLAS has no such GEMM). Batch dims broadcast: an operand without them is read
with batch stride 0; a partly broadcast one is copied first.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ember.backend.cuda import templates
from ember.backend.cuda.codegen import BLOCK, MAX_GRID
from ember.backend.cuda.dtypes import dtype_of
from ember.backend.cuda.tensor import CudaTensor
from ember.backend.dtype import DType

if TYPE_CHECKING:
    from ember.backend.cuda.backend import CudaBackend

# cuBLAS / CUDA library enums.
_CUDA_R = {DType.FLOAT32: 0, DType.FLOAT64: 1, DType.FLOAT16: 2, DType.BFLOAT16: 14}
COMPUTE_32F, COMPUTE_64F, COMPUTE_32F_FAST_TF32 = 68, 70, 77
GEMM_DEFAULT = -1
OP_N = 0


def _batched(backend: CudaBackend, x: CudaTensor, batch: tuple[int, ...]) -> tuple[CudaTensor, int]:
    """``x`` (``[..., r, c]``) as a contiguous operand and its batch stride (0 if shared)."""
    r, c = x.shape[-2:]
    own = x.shape[:-2]
    if math.prod(own) <= 1:
        x = backend.contiguous(backend.reshape(x, (r, c)))
        return x, 0
    if tuple((1,) * (len(batch) - len(own)) + own) != batch:
        x = backend.expand(x, batch + (r, c))
    return backend.contiguous(x), r * c


def matmul(backend: CudaBackend, a: CudaTensor, b: CudaTensor) -> CudaTensor:
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    m, k = a.shape[-2:]
    n = b.shape[-1]
    out = backend.empty(batch + (m, n), a.dtype)
    count = math.prod(batch)
    if out.size == 0:
        return out
    if k == 0:
        return backend.full(out.shape, 0, dtype_of(a.dtype))
    a, sa = _batched(backend, a, batch)
    b, sb = _batched(backend, b, batch)
    d = dtype_of(a.dtype)
    if d not in _CUDA_R:
        grid = min(max(-(-out.size // BLOCK), 1), MAX_GRID)
        backend._template(
            ("matmul_int", d),
            lambda: templates.matmul_int(d),
            grid,
            (
                np.uint64(a.ptr),
                np.uint64(b.ptr),
                np.uint64(out.ptr),
                np.int64(count),
                np.int64(m),
                np.int64(k),
                np.int64(n),
                np.int64(sa),
                np.int64(sb),
            ),
        )
        return out
    rt = backend.runtime
    scalar = np.float64 if d is DType.FLOAT64 else np.float32
    alpha, beta = np.array(1, scalar), np.array(0, scalar)
    compute = (
        COMPUTE_64F
        if d is DType.FLOAT64
        else (COMPUTE_32F_FAST_TF32 if (d is DType.FLOAT32 and getattr(backend, "allow_tf32", False)) else COMPUTE_32F)
    )
    t = _CUDA_R[d]
    item = a.dtype.itemsize
    # Row-major C = A @ B is column-major C^T = B^T A^T.
    rt.gemm(
        OP_N,
        OP_N,
        n,
        m,
        k,
        alpha.ctypes.data,
        b.ptr + b.view.offset * item,
        t,
        n,
        sb,
        a.ptr + a.view.offset * item,
        t,
        k,
        sa,
        beta.ctypes.data,
        out.ptr,
        t,
        n,
        m * n,
        count,
        compute,
        GEMM_DEFAULT,
    )
    return out


__all__ = ["matmul"]
