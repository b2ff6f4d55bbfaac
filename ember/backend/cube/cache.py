"""Compiled kernels, generated once per key and kept in memory.

A key names everything the generated source depends on: the op (or expression),
the storages of the operands and their layout classes. Shapes, strides and scalars
are runtime parameters, so one kernel serves every shape of its class.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ember.backend.cube.runtime import Runtime


@dataclass(frozen=True)
class KernelSource:
    """Generated WGSL with its bindings: ``n_in`` read-only buffers, then ``n_out`` written ones."""

    name: str
    source: str
    n_in: int
    n_out: int


@dataclass(frozen=True)
class Kernel:
    name: str
    pipeline: Any
    n_in: int
    n_out: int
    source: str


class KernelCache:
    """Kernels by key; counts compiles and hits in the runtime's stats."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._kernels: dict[Any, Kernel] = {}

    def get(self, key: Any, build: Callable[[], KernelSource]) -> Kernel:
        kernel = self._kernels.get(key)
        if kernel is not None:
            self._runtime.stats["cache_hits"] += 1
            return kernel
        with self._runtime.lock:  # one compile when two threads miss at once
            kernel = self._kernels.get(key)
            if kernel is None:
                src = build()
                pipeline = self._runtime.compile(src.name, src.source, src.n_in, src.n_out)
                kernel = self._kernels[key] = Kernel(src.name, pipeline, src.n_in, src.n_out, src.source)
        return kernel

    def __len__(self) -> int:
        return len(self._kernels)

    def keys(self) -> list[Any]:
        return list(self._kernels)
