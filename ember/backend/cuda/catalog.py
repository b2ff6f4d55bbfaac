"""Every kernel the cuda backend can emit, generated without a GPU.

:func:`kernels` runs the backend's ops on a :class:`RecordingRuntime` (no device:
allocations are fake addresses, launches are recorded, read-backs give ones) over
every op of the enums, every dtype an op is defined for, and each layout class the
generated code distinguishes (contiguous, broadcast, strided, one element, 64-bit
indexing; short rows, long rows and columns for reductions). The result, a map from
kernel key to ``(name, source)``, is what CI compiles with NVRTC for sm_80 and sm_90
(``tests/cuda/test_compile.py``); ``python -m ember.backend.cuda.catalog`` prints
how many there are and can fill the on-disk cache for an architecture.
"""

from __future__ import annotations

import sys
from collections import Counter
from contextlib import nullcontext
from typing import Any

import numpy as np

from ember.backend.cuda.backend import CudaBackend
from ember.backend.cuda.dtypes import family
from ember.backend.cuda.lowering import LOWERED_BINARY, LOWERED_UNARY
from ember.backend.distribution import Distribution
from ember.backend.dtype import DType
from ember.backend.ops import ArgReduceOp, BinaryOp, CumulativeOp, ReduceOp, UnaryOp

DTYPES = tuple(d for d in DType if not d.is_complex)  # the cuda backend has no complex kernels


class _Mem:
    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


class RecordingRuntime:
    """A stand-in for :class:`~ember.backend.cuda.runtime.CudaRuntime` that
    records the kernels an op would compile and launch, with no GPU."""

    #: No stream to capture: plans launch op by op (see ``CudaRuntime.graphs``).
    graphs = False

    def __init__(self, arch: str = "sm_90") -> None:
        self.arch = arch
        self.index = 0
        self.name = "recording"
        self.device = nullcontext()
        self.stats: Counter = Counter()
        self.sources: dict[Any, tuple[str, str]] = {}
        self._next = 1 << 20

    def alloc(self, nbytes: int) -> _Mem:
        self._next += (int(nbytes) + 255) // 256 * 256 + 256
        return _Mem(self._next)

    def upload(self, array: np.ndarray) -> _Mem:
        return self.alloc(array.nbytes)

    def download(self, mem: Any, offset: int, out: np.ndarray) -> np.ndarray:
        out[...] = 1
        return out

    def copy(self, dst: Any, src: Any, nbytes: int) -> None:
        pass

    def memset(self, mem: Any, nbytes: int) -> None:
        pass

    def function(self, key: Any, build: Any) -> Any:
        if key not in self.sources:
            self.sources[key] = build()
        return key

    def functions(self, key: Any, build: Any) -> dict[str, Any]:
        if key not in self.sources:
            names, source = build()
            self.sources[key] = (names[0] if names else "plan", source)
            self.modules = getattr(self, "modules", {})
            self.modules[key] = names
        return {name: (key, name) for name in self.modules[key]}

    def launch(self, fn: Any, grid: int, block: int, args: tuple) -> None:
        self.stats["launches"] += 1

    def gemm(self, *args: Any) -> None:
        self.stats["launches"] += 1
        self.stats["gemms"] += 1

    def sync(self) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def memory_stats(self) -> dict[str, int]:
        return {"allocated": 0, "reserved": 0, "free_device": 0, "total_device": 0}


def _layouts(b: CudaBackend, dtype: DType) -> list[Any]:
    """Operands of each layout class: contiguous, strided (transposed), sliced with an
    offset, and one with more than 2**31 elements (64-bit indexing)."""
    d = dtype.np
    base = b.empty((6, 5), d)
    return [
        b.empty((7,), d),
        b.permute(base, (1, 0)),
        b.slice(base, ((1, 6, 2), (0, 5, 1))),
        b.empty((3, 1 << 30), d),
    ]


def _record(b: CudaBackend) -> None:
    e = b.empty
    for dtype in DTYPES:
        d = dtype.np
        fam = family(dtype)
        b.full((3, 4), 1, dtype)
        b.arange(0, 10, 3, dtype) if not dtype.is_bool else None
        for kind in ("uniform", "normal", "bernoulli"):
            dist = {
                "uniform": Distribution.uniform(0.0, 1.0),
                "normal": Distribution.normal(0.0, 1.0),
                "bernoulli": Distribution.bernoulli(0.5),
            }[kind]
            b.random((9,), dist, dtype, 1, 2)
        x = e((4, 6), d)
        for uop in UnaryOp:
            if uop in LOWERED_UNARY[fam]:
                b.unary(uop, x)
        scalar = 2.5 if dtype.is_float else (True if dtype.is_bool else 3)
        for bop in BinaryOp:
            if bop in LOWERED_BINARY[fam]:
                b.binary(bop, x, x)
                b.binary(bop, x, scalar)
        for layout in _layouts(b, dtype):
            b.binary(BinaryOp.ADD if fam != "b" else BinaryOp.LOGICAL_OR, layout, b.expand(e((1,), d), layout.shape))
            b.unary(UnaryOp.NEG if fam in "fi" else UnaryOp.LOGICAL_NOT, layout)
        b.binary(BinaryOp.MAXIMUM, e((4, 1), d), e((1, 6), d))
        cond = e((4, 6), np.dtype(np.bool_))
        b.where(cond, x, x)
        b.where(cond, x, scalar)
        b.where(cond, scalar, x)
        if not dtype.is_bool:
            b.clamp(x, scalar, None)
            b.clamp(x, None, scalar)
            b.clamp(x, scalar, scalar)
        for other in DTYPES:
            b.cast(x, other)
        # Reductions: short rows, long rows, columns, and middle dims.
        for rop in ReduceOp:
            if rop == ReduceOp.MEAN and not dtype.is_float:
                continue
            b.reduce(rop, e((5, 7), d), 1)
            b.reduce(rop, e((3, 4096), d), 1)
            b.reduce(rop, e((9, 6), d), 0)
            b.reduce(rop, b.permute(e((3, 4, 5), d), (2, 0, 1)), 1)
        for aop in ArgReduceOp:
            b.arg_reduce(aop, e((4, 5), d), 1)
        for cop in CumulativeOp:
            if cop == CumulativeOp.LOGCUMSUMEXP and not dtype.is_float:
                continue
            b.cumulative(cop, e((4, 5), d), 0)
        b.argsort(e((3, 8), d), 1, False)
        b.argsort(e((3, 8), d), 0, True)
        idx = e((4, 3), np.dtype(np.int64))
        b.gather(e((4, 5), d), 1, idx)
        b.select(e((4, 5), d), 0, e((3,), np.dtype(np.int64)))
        if not dtype.is_bool:
            b.scatter_add(e((4, 5), d), 1, idx, e((4, 3), d))
            b.select_add(e((4, 5), d), 0, e((3,), np.dtype(np.int64)), e((3, 5), d))
        b.slice_assign(e((4, 5), d), ((1, 3, 1), (0, 5, 2)), e((2, 3), d))
        b.cat([e((2, 5), d), e((3, 5), d)], 0)
        if not dtype.is_float:
            b.matmul(e((2, 3, 4), d), e((4, 5), d))
    for rank in range(1, 5):
        b.argwhere(e((2,) * rank, np.dtype(np.bool_)))


def kernels(arch: str = "sm_90") -> dict[Any, tuple[str, str]]:
    """Every kernel the backend emits over the catalogue's ops, dtypes and layouts:
    ``{key: (name, source)}`` (sources without the prelude)."""
    runtime = RecordingRuntime(arch)
    _record(CudaBackend(0, runtime))  # type: ignore[arg-type]
    return dict(runtime.sources)


def batches(sources: list[tuple[str, str]], size: int) -> list[str]:
    """Sources joined into compilation units of ``size`` kernels; each kernel sits in
    its own namespace, so helpers of different templates never collide."""
    from ember.backend.cuda.nvrtc import full_source

    out = []
    for start in range(0, len(sources), size):
        chunk = sources[start : start + size]
        body = "\n".join(f"namespace unit{start + i} {{\n{src}\n}}" for i, (_, src) in enumerate(chunk))
        out.append(full_source(body))
    return out


def main(argv: list[str]) -> int:
    found = kernels()
    print(f"{len(found)} kernels")
    if argv and argv[0] == "--warm":
        from ember.backend.cuda.nvrtc import compile_source, full_source

        arch = argv[1] if len(argv) > 1 else "sm_90"
        for name, src in found.values():
            compile_source(full_source(src), arch, name=f"{name}.cu")
        print(f"compiled for {arch}")
    return 0


__all__ = ["RecordingRuntime", "batches", "kernels"]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
