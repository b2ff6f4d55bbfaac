"""flex's float32 matrix products as the inline vector loops compiled plans emit
(:mod:`ember.backend.kernel.llvm.small_gemm`), compiled per shape and layout for the
host: ``linear`` forward (the bias as the product's addend) and backward, and the
recurrent layers' weight gradients, so eager runs the same product as compiled code.

A product applies when it is float32, 2-D, ``A`` read through any element strides,
``B``'s rows dense, ``n`` whole vectors of the host, at least one register tile of rows
and :data:`MIN_WORK` multiply-adds (a shape's compile, about 30 ms and once per
machine thanks to the object cache, is then won back within a few calls), with BLAS on
one thread (``EMBER_NUM_THREADS``, default 1: the loops run on one core). Otherwise, and
under ``EMBER_FLEX_NATIVE=0`` or ``EMBER_GEMM=blas``, the callers keep numpy.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import numpy as np

from ember.backend.flex import blas, native
from ember.backend.flex.native_pool import cached, shared_entry

_F32 = np.dtype(np.float32)
#: Smaller products stay with numpy (BLAS's set-up is small beside them anyway).
MIN_WORK = 1 << 20


def _lanes() -> int:
    from ember.backend.kernel.llvm import jit, small_gemm

    return small_gemm.lanes(jit.vector_width())


def _elements(strides: tuple[int, ...]) -> tuple[int, ...] | None:
    if any(s % 4 or s < 0 for s in strides):
        return None
    return tuple(s // 4 for s in strides)


def matmul(
    a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None, out: np.ndarray | None = None
) -> np.ndarray | None:
    """``a @ b (+ bias)`` for ``a`` ``[m, k]``, ``b`` ``[k, n]`` and ``bias`` ``[n]`` (into
    ``out``, a C-contiguous float32 ``[m, n]``, where given), or ``None`` where the inline
    product does not apply (see the module docstring)."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[0] * a.shape[1] * b.shape[1] < MIN_WORK:
        return None  # first, and without an import: most of a small model's products end here
    from ember.backend.kernel.llvm import small_gemm

    if a.dtype != _F32 or b.dtype != _F32 or (bias is not None and bias.dtype != _F32):
        return None
    (m, k), n = a.shape, b.shape[1]
    if out is not None and (out.shape != (m, n) or out.dtype != _F32 or not out.flags.c_contiguous):
        return None
    if m < small_gemm.ROWS or not small_gemm.applies(n, _lanes()) or not small_gemm.enabled():
        return None
    loaded = blas.load()
    if os.environ.get(native.NATIVE_ENV, "1") == "0" or (loaded is not None and loaded.threads > 1):
        return None  # off, or a multi-threaded BLAS (the loops run on one core)
    a_strides, b_strides = _elements(a.strides), _elements(b.strides)
    if a_strides is None or b_strides is None or b_strides[1] != 1:
        b = np.ascontiguousarray(b)
        b_strides = (n, 1)
    if a_strides is None:
        a = np.ascontiguousarray(a)
        a_strides = (k, 1)
    with_bias = bias is not None
    a_rows, a_cols = a_strides  # two dims

    def build() -> Any:
        # the function compiled plans call for the same product (kernel/llvm/shared.py)
        addend = 0 if with_bias else None  # the bias row, broadcast over the rows

        def address() -> int:
            return small_gemm.gemm_kernel(m, n, k, (a_rows, a_cols), b_strides[0], n, _lanes(), addend).address()

        return shared_entry(address, [ctypes.c_void_p] * 4)

    found = cached(("gemm", m, n, k, a_strides, b_strides[0], with_bias), build)
    if found is None:
        return None
    if out is None:
        out = np.empty((m, n), _F32)
    d = np.ascontiguousarray(bias) if bias is not None else out
    found(native.address(a), native.address(b), native.address(out), native.address(d))
    return out
