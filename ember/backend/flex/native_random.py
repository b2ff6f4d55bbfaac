"""flex's uniform and bernoulli draws by the shared Philox fill
(:mod:`ember.backend.kernel.llvm.philox_fill`): one function per (kind, float32 or
float64) that compiled plans call too, so an eager run leaves it in the object cache
for them, and the same values as numpy's :func:`ember.backend.philox.sample`, bit for
bit.

Draws of :data:`MIN_ELEMENTS` values or more; other float widths and ints are drawn
as float32 and cast, as :func:`~ember.backend.philox.sample` does. Smaller draws,
normal draws, float32 ranges too wide for float32 (numpy names the problem), hosts
where llvmlite cannot compile, and ``EMBER_FLEX_NATIVE=0`` return ``None``: flex then
draws with numpy.

Measured (``benchmarks/rng.py --clock cpu``, AVX-512 host): a 1M-value float32
bernoulli draw 0.36 ms against numpy's 4.70 ms; W4's GPT with dropout 0.1 steps
eagerly in 38 ms against 50 ms.
"""

from __future__ import annotations

import ctypes
import math
import os
from typing import Any

import numpy as np

from ember.backend.distribution import Distribution
from ember.backend.dtype import DType
from ember.backend.flex import native
from ember.backend.flex.native_pool import cached, shared_entry

#: Smaller draws stay with numpy (a ctypes call costs about as much as their numpy draw).
MIN_ELEMENTS = 256
_KINDS = frozenset({"uniform", "bernoulli"})
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_MASK64 = (1 << 64) - 1
#: fill(out, n, key, counter, p0, p1, p2)
_ARGS = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64, ctypes.c_uint64] + [ctypes.c_double] * 3


def random(
    shape: tuple[int, ...], distribution: Distribution, dtype: DType, key: int, counter: int
) -> np.ndarray | None:
    """The draw of ``shape`` values of ``dtype`` at ``(key, counter)`` by the shared fill,
    or ``None`` where it does not apply (see the module docstring)."""
    n = math.prod(shape)
    if n < MIN_ELEMENTS or distribution.kind not in _KINDS or os.environ.get(native.NATIVE_ENV, "1") == "0":
        return None
    value = _F64 if dtype is DType.FLOAT64 else _F32
    from ember.backend.kernel.llvm import philox_fill

    if not philox_fill.applies(distribution, value):
        return None
    fill = cached(("philox_fill", distribution.kind, value.str), lambda: _entry(distribution.kind, value))
    if fill is None:
        return None
    out = np.empty(n, value)
    fill(
        native.address(out),
        n,
        key & _MASK64,
        counter & _MASK64,
        *philox_fill.parameters(distribution.kind, distribution.a, distribution.b, value),
    )
    return out.reshape(shape).astype(dtype.np, copy=False)


def _entry(kind: str, dtype: np.dtype) -> Any:
    """The fill's ctypes entry point, or ``None`` where it cannot compile."""
    from ember.backend.kernel.llvm import philox_fill

    return shared_entry(lambda: philox_fill.fill_kernel(kind, dtype).address(), _ARGS)


__all__ = ["MIN_ELEMENTS", "random"]
