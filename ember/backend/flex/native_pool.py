"""flex's native max pooling: the kernel layer's loop nests
(:mod:`ember.backend.kernel.llvm.pooling`, the ones fusion's compiled steps run)
compiled per shape for the host CPU, so eager and compiled code pool with the same
kernel: forward (values, and the indices when asked) and backward (the gradient
scattered to its indices).

Each geometry compiles once per process (kept in memory) and once per machine (the
kernel layer's object cache keeps the machine code across processes). Arrays below
:data:`ember.backend.flex.native.MIN_ELEMENTS` elements, dtypes other than float32
and float64, negative padding, or ``EMBER_FLEX_NATIVE=0`` return ``None``: flex then
runs its numpy version of the same loop.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ember.backend.flex import native

_FLOATS = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
_INDEX = np.dtype(np.int64)
_LOCK = threading.Lock()
#: (kind, dtype, geometry...) -> ctypes function (or None where it would not compile);
#: "off" -> True turns the kernels off (tests compare against the numpy version).
_STATE: dict[Any, Any] = {}


def enabled(size: int, dtype: np.dtype) -> bool:
    return (
        size >= native.MIN_ELEMENTS
        and dtype in _FLOATS
        and not _STATE.get("off")
        and os.environ.get(native.NATIVE_ENV, "1") != "0"
    )


def cached(key: tuple, build: Callable[[], Any]) -> Any:
    if key in _STATE:
        return _STATE[key]
    with _LOCK:
        if key not in _STATE:
            _STATE[key] = build()
    return _STATE[key]


def shared_entry(address: Callable[[], int], argtypes: list[Any]) -> Any:
    """A ctypes entry point of a kernel shared with compiled code
    (:class:`~ember.backend.kernel.llvm.shared.SharedKernel`; ``address`` compiles or
    loads it and gives its address) taking ``argtypes``; ``None`` where it cannot
    compile (an unsupported host or llvmlite version: numpy instead)."""
    try:
        at = address()
    except Exception:
        return None
    return ctypes.CFUNCTYPE(None, *argtypes)(at)


def compile_entry(emit: Callable[[Any], None], name: str, pointers: int = 3, recipe: tuple | None = None) -> Any:
    """A module with one ``void name(ptr, ptr, ptr)`` (``pointers`` of them) whose body
    ``emit(builder, args)`` writes; its ctypes entry point (``None`` where it cannot
    compile).

    ``recipe`` (the kernel's :func:`cached` key: every value its IR depends on but
    ember's source and the host) keys the object cache, so that a kernel compiled by
    an earlier process loads without its IR being emitted and printed."""
    try:
        from llvmlite import ir

        from ember.backend.kernel.llvm import jit
        from ember.backend.kernel.llvm.builder import KernelBuilder

        def text() -> str:
            module = ir.Module(name=name)
            ptr = ir.PointerType()
            fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr] * pointers), name=name)
            for arg in fn.args:
                arg.add_attribute("noalias")
            fn.attributes.add("nounwind")
            b = ir.IRBuilder(fn.append_basic_block("entry"))
            emit((KernelBuilder(b), fn.args))
            b.ret_void()
            return str(module)

        full = None if recipe is None else ("native_pool.compile_entry", name, pointers, *recipe)
        compiled = jit.compile_module(text, [name], cache=True, recipe=full)
    except Exception:  # an unsupported host or llvmlite version: numpy instead
        return None
    p = ctypes.c_void_p
    entry = ctypes.CFUNCTYPE(None, *([p] * pointers))(compiled.addresses[name])
    return compiled.engine, entry  # the engine owns the code


def max_pool(
    x: np.ndarray,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[tuple[int, int], ...],
    dilation: tuple[int, ...],
    out: tuple[int, ...],
    with_indices: bool,
) -> tuple[np.ndarray, np.ndarray | None] | None:
    """Max pooling of ``x`` ``[N, C, *spatial]`` to ``out`` positions per plane (the
    values, and int64 flat positions in the input plane when ``with_indices``), or
    ``None`` where the kernel does not apply (see the module docstring)."""
    if not enabled(x.size, x.dtype) or any(lo < 0 or hi < 0 for lo, hi in padding):
        return None
    from ember.backend.kernel.llvm.pooling import PoolGeometry, max_pool_rows

    dtype = x.dtype
    rows = x.shape[0] * x.shape[1]
    geometry = PoolGeometry(
        spatial=tuple(x.shape[2:]),
        out=tuple(out),
        kernel=tuple(kernel),
        stride=tuple(stride),
        pad=tuple(lo for lo, _ in padding),
        dilation=tuple(dilation),
    )

    def emit(parts: Any) -> None:
        e, (src, values, indices) = parts
        max_pool_rows(e, geometry, dtype, src, values, indices if with_indices else None, rows)

    key = ("max_pool", dtype.str, rows, geometry, with_indices)
    found = cached(key, lambda: compile_entry(emit, "ember_max_pool", recipe=key))
    if found is None:
        return None
    x = np.ascontiguousarray(x)
    values = np.empty(x.shape[:2] + tuple(out), dtype)
    indices = np.empty(values.shape, _INDEX) if with_indices else None
    found[1](native.address(x), native.address(values), 0 if indices is None else native.address(indices))
    return values, indices


def max_pool_backward(grad: np.ndarray, indices: np.ndarray, input_shape: tuple[int, ...]) -> np.ndarray | None:
    """``[N, C, *input]`` zeros with each of ``grad``'s values added at its index in its
    plane (indices already checked to lie in the plane), or ``None`` where the kernel
    does not apply."""
    dtype = grad.dtype
    if not enabled(int(np.prod(input_shape)), dtype) or indices.shape != grad.shape:
        return None
    from ember.backend.kernel.llvm.pooling import max_pool_backward_rows

    rows = input_shape[0] * input_shape[1]
    plane, out_plane = int(np.prod(input_shape[2:])), int(np.prod(grad.shape[2:]))

    def emit(parts: Any) -> None:
        e, (g, idx, result) = parts
        max_pool_backward_rows(e, dtype, g, idx, result, rows, plane, out_plane)

    key = ("max_pool_backward", dtype.str, rows, plane, out_plane)
    found = cached(key, lambda: compile_entry(emit, "ember_max_pool_backward", recipe=key))
    if found is None:
        return None
    grad = np.ascontiguousarray(grad)
    indices = np.ascontiguousarray(indices, dtype=_INDEX)
    result = np.empty(tuple(input_shape), dtype)
    found[1](native.address(grad), native.address(indices), native.address(result))
    return result


__all__ = ["cached", "compile_entry", "enabled", "max_pool", "max_pool_backward"]
