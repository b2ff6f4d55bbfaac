"""flex's native ``grid_sample`` kernels (see :mod:`ember.backend.flex.grid_sample`,
which calls them): the gather of the forward pass and the scatter of the backward pass
as LLVM loops through the kernel layer (:mod:`ember.backend.kernel.llvm`), float32.

The sampling points come from numpy (:func:`ember.backend.flex.grid_sample.corners`:
the coordinate maps, padding modes and ``align_corners`` stay in one place): per batch
entry and output point, ``K`` flat indices into the input's spatial positions (int32)
and ``K`` weights (zero where a corner lies outside), ``K`` = 1 (nearest), 4
(bilinear) or 8 (trilinear), each ``K`` kernels of their own with the corner loop
unrolled, compiled on the first call that needs them. Per channel plane (which stays in cache) the kernels then run:

* forward: ``out[p] = sum_k w[p, k] * x[idx[p, k]]`` (the corners summed in order, as
  the numpy version does, so both give the same bits);
* backward: ``gx[idx[p, k]] += w[p, k] * g[p]`` (the scatter numpy could only do
  with ``bincount`` per channel) and ``dot[p, k] += g[p] * x[idx[p, k]]`` summed over
  channels, the grid gradient's per-corner term.

Compiled once per process and corner count on first use (modules separate from
:mod:`ember.backend.flex.native`'s, so processes that never sample do not pay for
them: about 0.5 s each); ``EMBER_FLEX_NATIVE=0`` turns them off like the other native
kernels.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.backend.flex import native

#: The corner counts compiled: nearest, bilinear, trilinear.
CORNERS = (1, 4, 8)

_LOCK = threading.Lock()
_STATE: dict[str | int, Any] = {}  # corner count -> kernels; "off" -> True turns them off


@dataclass(frozen=True)
class GridKernels:
    """ctypes entry points for one corner count (and the engine that owns them)."""

    engine: Any
    forward: Any
    backward_x: Any
    backward_dot: Any


def kernels(corners: int = 4, size: int | None = None) -> GridKernels | None:
    """The compiled kernels for ``corners`` (one of :data:`CORNERS`), built on first
    use; ``None`` where they cannot be (or are turned off), or for an output of
    ``size`` elements below :data:`ember.backend.flex.native.MIN_ELEMENTS`. Tests turn
    them off with ``_STATE["off"] = True``."""
    if size is not None and size < native.MIN_ELEMENTS:
        return None
    if _STATE.get("off") or corners not in CORNERS:
        return None
    if corners in _STATE:
        return _STATE[corners]
    with _LOCK:
        if corners not in _STATE:
            _STATE[corners] = _build(corners) if os.environ.get(native.NATIVE_ENV, "1") != "0" else None
    return _STATE[corners]


def _build(k: int) -> GridKernels | None:
    try:
        from ember.backend.kernel.llvm import jit
    except ImportError:  # pragma: no cover - llvmlite is a runtime dependency
        return None
    emitter = _GridEmitter()
    names = [emitter.forward(k), emitter.backward_x(k), emitter.backward_dot(k)]
    try:
        compiled = jit.compile_module(str(emitter.module), names, unroll=True, codegen_opt=3, cache=True)
    except Exception:  # an unsupported host or llvmlite version: numpy instead
        return None
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    fns = [ctypes.CFUNCTYPE(None, p, p, p, p, p, i64, i64, i64, i64)(compiled.addresses[name]) for name in names]
    return GridKernels(compiled.engine, *fns)


class _Emitter:
    """Builds functions into one module over the kernel layer's loops (gathers and
    scatters: indexed accesses that row programs do not express)."""

    def __init__(self) -> None:
        from llvmlite import ir

        from ember.backend.kernel.llvm import jit

        self.ir = ir
        self.module = ir.Module(name="ember_flex_native")
        self.f32 = ir.FloatType()
        self.i32 = ir.IntType(32)
        self.i64 = ir.IntType(64)
        self.ptr = ir.PointerType()
        self.void = ir.VoidType()
        self.width = jit.vector_width()
        self.b: Any = None

    def c(self, value: float) -> Any:
        return self.ir.Constant(self.f32, value)

    def function(self, name: str, args: list[Any]) -> Any:
        """A new function ``name``; :attr:`b` builds its body. Returns its arguments."""
        from ember.backend.kernel.llvm.mathlib import kernel_function

        fn = kernel_function(self.module, name, args, self.width)
        self.b = self.ir.IRBuilder(fn.append_basic_block("entry"))
        return fn.args

    def loop(self, count: Any, body: Callable[..., Any], carried: list[Any] | None = None) -> list[Any]:
        """``for i in range(count): carried = body(i, *carried)`` (a run-time count);
        returns the final carried values (reductions)."""
        from ember.backend.kernel.llvm.loops import Loops

        return Loops(self.b).count(count, lambda i, phis: body(i, *phis) or [], carried)

    def load(self, base: Any, index: Any) -> Any:
        b = self.b
        return b.load(b.gep(base, [index], source_etype=self.f32), typ=self.f32, align=4)

    def store(self, value: Any, base: Any, index: Any) -> None:
        b = self.b
        b.store(value, b.gep(base, [index], source_etype=self.f32), align=4)


class _GridEmitter(_Emitter):
    """The three loop nests, each ``for n: for c: for p: for k (unrolled)`` over
    ``x``/``gx`` ``[N, C, S]``, ``g``/``out`` ``[N, C, P]`` and ``idx``/``w``/``dot``
    ``[N, P, K]``."""

    def _nest(self, name: str, k: int, point: Any) -> str:
        """A function ``name(a, b, idx, w, d, n, c, s, p)``; ``point(planes, j)`` runs per
        output point ``j`` with ``planes = (a plane, b row, idx row, w row, d row)``."""
        a, bb, idx, w, d, n, c, s, p = self.function(name, [self.ptr] * 5 + [self.i64] * 4)
        b = self.b
        kk = self.ir.Constant(self.i64, k)

        def batch(i):
            pk = b.mul(p, kk)
            start = b.mul(i, pk)
            idx_b = b.gep(idx, [start], source_etype=self.i32)
            w_b, d_b = (b.gep(t, [start], source_etype=self.f32) for t in (w, d))

            def channel(ch):
                plane = b.add(b.mul(i, c), ch)
                a_plane = b.gep(a, [b.mul(plane, s)], source_etype=self.f32)
                b_row = b.gep(bb, [b.mul(plane, p)], source_etype=self.f32)
                self.loop(p, lambda j: point((a_plane, b_row, idx_b, w_b, d_b), j))

            self.loop(c, channel)

        self.loop(n, batch)
        b.ret_void()
        return name

    def _corner(self, rows: tuple[Any, ...], j: Any, k: int, q: int) -> tuple[Any, Any, Any]:
        """``(flat index, weight, slot)`` of corner ``q`` of point ``j``."""
        b = self.b
        slot = b.add(b.mul(j, self.ir.Constant(self.i64, k)), self.ir.Constant(self.i64, q))
        index = b.load(b.gep(rows[2], [slot], source_etype=self.i32), typ=self.i32, align=4)
        return b.sext(index, self.i64), self.load(rows[3], slot), slot

    def forward(self, k: int) -> str:
        """``ember_grid_sample_k{k}(x, out, idx, w, unused, n, c, s, p)``."""

        def point(rows, j):
            b = self.b
            acc = self.c(0.0)
            for q in range(k):
                index, weight, _ = self._corner(rows, j, k, q)
                acc = b.fadd(acc, b.fmul(self.load(rows[0], index), weight))
            self.store(acc, rows[1], j)

        return self._nest(f"ember_grid_sample_k{k}", k, point)

    def backward_x(self, k: int) -> str:
        """``ember_grid_sample_backward_x_k{k}(gx, g, idx, w, unused, n, c, s, p)``:
        ``gx`` (zeroed by the caller) gains ``w * g`` at every corner."""

        def point(rows, j):
            b = self.b
            g = self.load(rows[1], j)
            for q in range(k):
                index, weight, _ = self._corner(rows, j, k, q)
                self.store(b.fadd(self.load(rows[0], index), b.fmul(weight, g)), rows[0], index)

        return self._nest(f"ember_grid_sample_backward_x_k{k}", k, point)

    def backward_dot(self, k: int) -> str:
        """``ember_grid_sample_backward_dot_k{k}(x, g, idx, w, dot, n, c, s, p)``:
        ``dot`` (zeroed by the caller) gains ``g * x`` at every corner, summed over
        channels."""

        def point(rows, j):
            b = self.b
            g = self.load(rows[1], j)
            for q in range(k):
                index, _, slot = self._corner(rows, j, k, q)
                self.store(b.fadd(self.load(rows[4], slot), b.fmul(g, self.load(rows[0], index))), rows[4], slot)

        return self._nest(f"ember_grid_sample_backward_dot_k{k}", k, point)


def _call(fn: Any, a: np.ndarray, b: np.ndarray, idx: np.ndarray, w: np.ndarray, d: np.ndarray | None) -> None:
    n, c = a.shape[:2]
    fn(
        native.address(a),
        native.address(b),
        native.address(idx),
        native.address(w),
        None if d is None else native.address(d),
        n,
        c,
        a.shape[2],
        b.shape[2],
    )


def forward(k: GridKernels, x: np.ndarray, idx: np.ndarray, w: np.ndarray, points: int) -> np.ndarray:
    """``[N, C, P]`` sampled from ``x`` ``[N, C, S]`` (contiguous float32)."""
    n, c = x.shape[:2]
    out = np.empty((n, c, points), np.float32)
    _call(k.forward, x, out, idx, w, None)
    return out


def backward(
    k: GridKernels, x: np.ndarray, g: np.ndarray, idx: np.ndarray, w: np.ndarray, need_x: bool, need_grid: bool
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(gx [N, C, S], dot [N, P, K])`` for ``g`` ``[N, C, P]`` (``None`` where not needed)."""
    gx = dot = None
    if need_x:
        gx = np.zeros(x.shape, np.float32)
        _call(k.backward_x, gx, g, idx, w, None)
    if need_grid:
        dot = np.zeros(idx.shape, np.float32)
        _call(k.backward_dot, x, g, idx, w, dot)
    return gx, dot
