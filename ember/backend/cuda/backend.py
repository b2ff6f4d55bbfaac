"""``CudaBackend``: every primitive of the backend protocol as a CUDA kernel.

Elementwise ops and reductions are one-node kernels of the fusion IR lowered by
:mod:`.codegen` (one compile per expression, dtypes, rank and layout class; shapes,
strides and scalars are parameters); the other ops are the templates of
:mod:`.templates`; floating-point matmuls go to cuBLAS (:mod:`.blas`). Layout ops
are free views. Module ops (convolution via im2col + GEMM, pooling, embedding) use
the protocol's defaults over these primitives.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.backend import philox
from ember.backend.base import Backend, Slices
from ember.backend.cuda import templates
from ember.backend.cuda.codegen import BLOCK, KernelBuilder
from ember.backend.cuda.dtypes import dtype_of, scalar_param_type
from ember.backend.cuda.indexing import CudaIndexing, _grid, _ptr
from ember.backend.cuda.runtime import CudaRuntime, DeviceScalar
from ember.backend.cuda.tensor import CudaTensor
from ember.backend.distribution import Distribution
from ember.backend.dtype import DType
from ember.backend.kernel.exprs import Expr, Exprs
from ember.backend.kernel.steps import Kernel, Reduction, Store
from ember.backend.kernel.views import View, size_of
from ember.backend.ops import BOOL_RESULT_BINARY, ArgReduceOp, BinaryOp, CumulativeOp, ReduceOp, UnaryOp

_BOOL = np.dtype(np.bool_)
_I64 = np.dtype(np.int64)
_F32 = np.dtype(np.float32)
#: Rows longer than this are sorted on the host (the rank kernel is quadratic in the row).
SORT_ROW_LIMIT = 16384


class CudaBackend(CudaIndexing, Backend):
    """The NVIDIA backend (see the module docstring). The device opens on the first op."""

    name = "cuda"
    fusion_target = "cuda"  # captured steps as CUDA Graphs

    def __init__(self, index: int = 0, runtime: CudaRuntime | None = None) -> None:
        self.index = index
        self._runtime = runtime
        self._launches: dict[Any, tuple] = {}

    @property
    def runtime(self) -> CudaRuntime:
        if self._runtime is None:
            self._runtime = CudaRuntime(self.index)
        return self._runtime

    def stats(self) -> dict[str, int]:
        """Counters: ``compiles``, ``launches``, ``uploads``, ``readbacks``, ``bytes_up``,
        ``bytes_down``, ``copies``, ``allocs``, ``syncs``."""
        return dict(self.runtime.stats)

    def memory_stats(self) -> dict[str, int]:
        return self.runtime.memory_stats()

    def empty_cache(self) -> None:
        self.runtime.empty_cache()

    def sync(self) -> None:
        if self._runtime is not None:
            self._runtime.sync()

    # ------------------------------------------------------------------ helpers
    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> CudaTensor:
        shape = tuple(int(n) for n in shape)
        return CudaTensor(
            self.runtime.alloc(size_of(shape) * np.dtype(dtype).itemsize), View.contiguous(shape), np.dtype(dtype)
        )

    def run(
        self,
        kernel: Kernel,
        tensors: dict[int, CudaTensor],
        scalars: dict[int, Any] | None = None,
        scalar_types: dict[int, str] | None = None,
        store_views: list[View] | None = None,
    ) -> tuple:
        """Launch a one-off IR kernel whose buffer ids index ``tensors`` (dynamic geometry).
        Returns what a repeat of the same launch needs (function, grid, buffer order,
        typed geometry, scalar slots), for :meth:`_map`'s cache."""
        if size_of(kernel.space) == 0:
            return (None, 0, [], [], [])
        dtypes = {b: t.dtype for b, t in tensors.items()}
        kb = KernelBuilder(kernel, dtypes, static=False, scalar_types=scalar_types, store_views=store_views)
        key = ("ir", kb.key())

        def build() -> tuple[str, str]:
            kb.name = "k_" + hashlib.sha1(repr(key).encode()).hexdigest()[:16]
            return kb.name, kb.build().source

        fn = self.runtime.function(key, build)
        geo_t = np.int32 if kb.index == "int" else np.int64
        order = kb.buffers()
        geo = [geo_t(v) for v in kb.geo.args()]
        args: list[Any] = [_ptr(tensors[b]) for b in order] + geo
        slots = []
        for slot in kb.used_slots:
            assert scalars is not None, "a kernel that reads scalars needs their values"
            t = (scalar_types or {}).get(slot, "double")
            slots.append((slot, t))
            args.append(np.float64(scalars[slot]) if t == "double" else np.int64(int(scalars[slot])))
        grid = kb.grid()
        self.runtime.launch(fn, grid, BLOCK, tuple(args))
        return fn, grid, order, geo, slots

    def _map(
        self,
        build,
        inputs: list[CudaTensor],
        shape: tuple[int, ...],
        out_dtype: np.dtype,
        scalars: Sequence[tuple[Any, np.dtype]] = (),
        tag: Any = None,
    ) -> CudaTensor:
        """An elementwise kernel: ``build(x, loads, scalar_exprs)`` gives the expression.

        ``tag`` names the expression ``build`` makes (with the operands' views and dtypes
        and the scalars' kinds it keys a launch cache: a repeated op skips code
        generation and geometry analysis, as a training step's ops do)."""
        sig = None
        if tag is not None:
            sig = (
                tag,
                shape,
                out_dtype,
                tuple((t.view, t.dtype) for t in inputs),
                tuple(("D", v.slot, dt) if type(v) is DeviceScalar else dt for v, dt in scalars),
            )
            hit = self._launches.get(sig)
            if hit is not None:
                fn, grid, order, geo, slots = hit
                out = self.empty(shape, out_dtype)
                operands = list(inputs)
                for v, _ in scalars:
                    if type(v) is DeviceScalar:
                        operands.append(v.table)
                operands.append(out)
                args = [np.uint64(operands[k].mem.ptr) for k in order] + geo
                for j, kind in slots:
                    v = scalars[j][0]
                    args.append(np.float64(v) if kind == "double" else np.int64(int(v)))
                if grid:
                    self.runtime.launch(fn, grid, BLOCK, tuple(args))
                return out
        x = Exprs()
        tensors = dict(enumerate(inputs))
        loads = [x.load(k, t.view.expand(shape), t.dtype) for k, t in enumerate(inputs)]
        sc = []
        host: dict[int, Any] = {}
        for j, (value, dt) in enumerate(scalars):
            if type(value) is DeviceScalar:  # a captured step's scalar: read from the device table
                k = len(tensors)
                tensors[k] = value.table
                load = x.load(k, View((), (), value.slot), value.table.dtype)
                sc.append(load if dt == value.table.dtype else x.make("cast", None, (load,), dt))
            else:
                sc.append(x.make("scalar", j, (), dt))
                host[j] = value
        expr = build(x, loads, sc)
        out = self.empty(shape, out_dtype)
        n = len(tensors)
        tensors[n] = out
        kernel = Kernel(tuple(shape), None, [], [Store(n, expr, False)])
        launch = self.run(kernel, tensors, host, {j: scalar_param_type(dt) for j, (_, dt) in enumerate(scalars)})
        if sig is not None and launch is not None:
            if len(self._launches) > 8192:
                self._launches.clear()
            self._launches[sig] = launch
        return out

    def _run_cached(self, sig: Any, tensors: list[CudaTensor], make) -> None:
        """Run the IR kernel ``make()`` gives (``(kernel, store_views)``, buffer ids indexing
        ``tensors``), or repeat its cached launch for the same ``sig``."""
        hit = self._launches.get(sig)
        if hit is None:
            kernel, store_views = make()
            hit = self.run(kernel, dict(enumerate(tensors)), store_views=store_views)
            if len(self._launches) > 8192:
                self._launches.clear()
            self._launches[sig] = hit
            return
        fn, grid, order, geo, _ = hit
        if grid:
            self.runtime.launch(fn, grid, BLOCK, tuple([np.uint64(tensors[k].mem.ptr) for k in order] + geo))

    def _template(self, key: Any, build, grid: int, args: tuple) -> None:
        fn = self.runtime.function(key, build)
        self.runtime.launch(fn, grid, BLOCK, args)

    def contiguous(self, x: CudaTensor) -> CudaTensor:
        if x.is_contiguous():
            return x
        return self._map(lambda e, ld, sc: ld[0], [x], x.shape, x.dtype, tag="copy")

    # ------------------------------------------------------------------ data boundary
    def from_numpy(self, array: np.ndarray) -> CudaTensor:
        array = np.ascontiguousarray(array)
        mem = self.runtime.upload(array)
        return CudaTensor(mem, View.contiguous(tuple(array.shape)), array.dtype)

    def to_numpy(self, x: CudaTensor) -> np.ndarray:
        out = np.empty(x.shape, x.dtype)
        if x.size == 0:
            return out
        x = self.contiguous(x)
        return self.runtime.download(x.mem, 0, out)

    # ------------------------------------------------------------------ creation
    def full(self, shape, value, dtype: DType) -> CudaTensor:
        np_dtype = dtype.np
        return self._map(lambda e, ld, sc: sc[0], [], tuple(shape), np_dtype, [(value, np_dtype)], tag="full")

    def arange(self, start, stop, step, dtype: DType) -> CudaTensor:
        n = len(range(start, stop, step))
        out = self.empty((n,), dtype.np)
        if n:
            self._template(
                ("arange", dtype),
                lambda: templates.arange(dtype),
                _grid(n),
                (_ptr(out), np.int64(n), np.int64(start), np.int64(step)),
            )
        return out

    def random(self, shape, distribution: Distribution, dtype: DType, key: int, counter: int) -> CudaTensor:
        shape = tuple(shape)
        n = math.prod(shape)
        out = self.empty(shape, dtype.np)
        if n == 0:
            return out
        wide = dtype is DType.FLOAT64
        if not wide:
            philox.check_float32(distribution)
        kind = {"uniform": 0, "normal": 1, "bernoulli": 2}[distribution.kind]
        if distribution.kind == "uniform" and not wide:
            p = [float(v) for v in philox.uniform_params(distribution.a, distribution.b)]
        elif distribution.kind == "uniform":
            a, b = float(distribution.a), float(distribution.b)
            p = [a, b, float(np.nextafter(b, -np.inf))]
        else:
            p = [float(distribution.a), float(distribution.b), 0.0]
        per = 2 if wide else 4
        blocks = -(-n // per)
        self._template(
            ("random", dtype),
            lambda: templates.random(dtype),
            _grid(blocks),
            (
                _ptr(out),
                np.int64(n),
                np.uint64(counter & philox.MASK64),
                np.uint32(key & 0xFFFF_FFFF),
                np.uint32((key >> 32) & 0xFFFF_FFFF),
                np.int32(kind),
                np.float64(p[0]),
                np.float64(p[1]),
                np.float64(p[2]),
            ),
        )
        return out

    # ------------------------------------------------------------------ elementwise
    def unary(self, op: UnaryOp, x: CudaTensor) -> CudaTensor:
        out_dtype = _BOOL if op in (UnaryOp.IS_NAN, UnaryOp.IS_INF, UnaryOp.IS_FINITE, UnaryOp.LOGICAL_NOT) else x.dtype
        return self._map(
            lambda e, ld, sc: e.make("unary", op, (ld[0],), out_dtype), [x], x.shape, out_dtype, tag=("unary", op)
        )

    def binary(self, op: BinaryOp, a: CudaTensor, b) -> CudaTensor:
        out_dtype = _BOOL if op in BOOL_RESULT_BINARY else a.dtype
        if isinstance(b, CudaTensor):
            shape = tuple(np.broadcast_shapes(a.shape, b.shape))
            return self._map(
                lambda e, ld, sc: e.make("binary", op, (ld[0], ld[1]), out_dtype),
                [a, b],
                shape,
                out_dtype,
                tag=("binary", op),
            )
        return self._map(
            lambda e, ld, sc: e.make("binary", op, (ld[0], sc[0]), out_dtype),
            [a],
            a.shape,
            out_dtype,
            [(b, a.dtype)],
            tag=("binary_scalar", op),
        )

    def where(self, cond: CudaTensor, a, b) -> CudaTensor:
        dtype = a.dtype if isinstance(a, CudaTensor) else b.dtype
        inputs = [cond] + [v for v in (a, b) if isinstance(v, CudaTensor)]
        scalars = [(v, dtype) for v in (a, b) if not isinstance(v, CudaTensor)]
        shape = tuple(np.broadcast_shapes(*(t.shape for t in inputs)))

        def build(e: Exprs, ld: list[Expr], sc: list[Expr]) -> Expr:
            li, si = iter(ld[1:]), iter(sc)
            left = next(li) if isinstance(a, CudaTensor) else next(si)
            right = next(li) if isinstance(b, CudaTensor) else next(si)
            return e.make("where", None, (ld[0], left, right), dtype)

        tag = ("where", isinstance(a, CudaTensor), isinstance(b, CudaTensor))
        return self._map(build, inputs, shape, dtype, scalars, tag=tag)

    def clamp(self, x: CudaTensor, low, high) -> CudaTensor:
        scalars = [(v, x.dtype) for v in (low, high) if v is not None]

        def build(e: Exprs, ld: list[Expr], sc: list[Expr]) -> Expr:
            it = iter(sc)
            lo = next(it) if low is not None else None
            hi = next(it) if high is not None else None
            return e.make("clamp", None, (ld[0], lo, hi), x.dtype)

        return self._map(build, [x], x.shape, x.dtype, scalars, tag=("clamp", low is not None, high is not None))

    def cast(self, x: CudaTensor, dtype: DType) -> CudaTensor:
        if x.dtype == dtype.np:
            return x
        return self._map(lambda e, ld, sc: e.make("cast", None, (ld[0],), dtype.np), [x], x.shape, dtype.np, tag="cast")

    # ------------------------------------------------------------------ matmul
    def matmul(self, a: CudaTensor, b: CudaTensor) -> CudaTensor:
        from ember.backend.cuda import blas

        return blas.matmul(self, a, b)

    def quantized_linear(self, x, values, scales, zero_points, bias, input_scale, value, group, activations):
        """Through :mod:`.quant`: the packed weight, dequantized in registers (an
        activation scheme rounds the input to its int8 grid first)."""
        from ember.backend.cuda import quant

        return quant.quantized_linear(
            self, x, values, scales, zero_points, bias, value, group, activations, input_scale
        )

    # ------------------------------------------------------------------ reductions
    def reduce(self, op: ReduceOp, x: CudaTensor, dim: int) -> CudaTensor:
        n = x.shape[dim]
        out_shape = x.shape[:dim] + (1,) + x.shape[dim + 1 :]
        out_dtype: np.dtype
        if op in (ReduceOp.ANY, ReduceOp.ALL):
            out_dtype = _BOOL
        elif op in (ReduceOp.SUM, ReduceOp.PROD) and x.dtype == _BOOL:
            out_dtype = _I64
        else:
            out_dtype = x.dtype
        if op == ReduceOp.MEAN and n == 0:
            return self.full(out_shape, float("nan"), dtype_of(x.dtype))
        if n == 0:
            identity = {ReduceOp.SUM: 0, ReduceOp.PROD: 1, ReduceOp.ANY: False, ReduceOp.ALL: True}
            if op not in identity:
                from ember.errors import ShapeError

                raise ShapeError(f"ember: {op} over an empty dim {dim} of shape {list(x.shape)} has no value")
            return self.full(out_shape, identity[op], dtype_of(out_dtype))
        out = self.empty(out_shape, out_dtype)

        def make() -> tuple[Kernel, None]:
            e = Exprs()
            load = e.load(0, x.view, x.dtype)
            acc = e.make("acc", (0, 0), (), out_dtype)
            return Kernel(tuple(x.shape), dim, [Reduction(op, load, out_dtype, n)], [Store(1, acc, True)]), None

        self._run_cached(("reduce", op, x.view, x.dtype, dim, out_dtype), [x, out], make)
        return out

    def _lines(self, x: CudaTensor, dim: int) -> tuple[CudaTensor, int, int, int]:
        """``x`` contiguous, as ``[outer, len, inner]`` around ``dim``."""
        x = self.contiguous(x)
        return x, math.prod(x.shape[:dim]), x.shape[dim], math.prod(x.shape[dim + 1 :])

    def arg_reduce(self, op: ArgReduceOp, x: CudaTensor, dim: int) -> CudaTensor:
        x, outer, length, inner = self._lines(x, dim)
        out = self.empty(x.shape[:dim] + (1,) + x.shape[dim + 1 :], _I64)
        if out.size and length:
            d = dtype_of(x.dtype)
            self._template(
                ("arg", op, d),
                lambda: templates.arg_reduce(op, d),
                _grid(outer * inner),
                (_ptr(x), _ptr(out), np.int64(outer), np.int64(length), np.int64(inner)),
            )
        return out

    def cumulative(self, op: CumulativeOp, x: CudaTensor, dim: int) -> CudaTensor:
        x, outer, length, inner = self._lines(x, dim)
        out = self.empty(x.shape, x.dtype)
        if out.size:
            d = dtype_of(x.dtype)
            self._template(
                ("scan", op, d),
                lambda: templates.cumulative(op, d),
                _grid(outer * inner),
                (_ptr(x), _ptr(out), np.int64(outer), np.int64(length), np.int64(inner)),
            )
        return out

    def argsort(self, x: CudaTensor, dim: int, descending: bool) -> CudaTensor:
        rank = len(x.shape)
        last = dim == rank - 1
        moved = x if last else self.permute(x, tuple(d for d in range(rank) if d != dim) + (dim,))
        length = x.shape[dim]
        if length > SORT_ROW_LIMIT:  # the rank kernel is quadratic: long rows sort on the host
            values = self.to_numpy(moved)
            if values.dtype.kind not in "biuf":  # bfloat16: sort its float32 values (exact)
                values = values.astype(np.float32)
            if descending:  # stable: ascending on the reversed rows, mapped back
                order = values.shape[-1] - 1 - np.flip(np.argsort(np.flip(values, -1), axis=-1, kind="stable"), -1)
            else:
                order = np.argsort(values, axis=-1, kind="stable")
            order = self.from_numpy(order.astype(np.int64))
        else:
            moved = self.contiguous(moved)
            order = self.empty(moved.shape, _I64)
            rows = math.prod(moved.shape[:-1])
            if order.size:
                d = dtype_of(x.dtype)
                self._template(
                    ("argsort", d),
                    lambda: templates.argsort(d),
                    _grid(order.size),
                    (_ptr(moved), _ptr(order), np.int64(rows), np.int64(length), np.int32(int(descending))),
                )
        if last:
            return order
        axes = list(range(rank - 1))
        axes.insert(dim, rank - 1)
        return self.permute(order, tuple(axes))

    # ------------------------------------------------------------------ layout
    def reshape(self, x: CudaTensor, shape) -> CudaTensor:
        shape = tuple(int(n) for n in shape)
        if -1 in shape:
            known = math.prod(n for n in shape if n != -1)
            shape = tuple(x.size // known if n == -1 else n for n in shape)
        view = x.view.reshape(shape)
        if view is None:
            x = self.contiguous(x)
            view = x.view.reshape(shape)
            assert view is not None  # a contiguous view reshapes without a copy
        return x.with_view(view)

    def permute(self, x: CudaTensor, axes) -> CudaTensor:
        return x.with_view(x.view.permute(tuple(axes)))

    def flip(self, x: CudaTensor, axes) -> CudaTensor:
        return x.with_view(x.view.flip(tuple(axes)))

    def expand(self, x: CudaTensor, shape) -> CudaTensor:
        return x.with_view(x.view.expand(tuple(shape)))

    def slice(self, x: CudaTensor, slices: Slices) -> CudaTensor:
        return x.with_view(x.view.slice(tuple(slices)))

    def _write(self, out: CudaTensor, region: View, value: CudaTensor) -> None:
        """Copy ``value`` into the ``region`` view of ``out``'s buffer."""

        def make() -> tuple[Kernel, list[View]]:
            e = Exprs()
            load = e.load(0, value.view.expand(region.shape), value.dtype)
            return Kernel(region.shape, None, [], [Store(1, load, False)]), [region]

        self._run_cached(("write", region, value.view, value.dtype, out.dtype), [value, out], make)

    def slice_assign(self, x: CudaTensor, slices: Slices, value: CudaTensor) -> CudaTensor:
        out = self.empty(x.shape, x.dtype)
        self._write(out, View.contiguous(x.shape), x)
        self._write(out, View.contiguous(x.shape).slice(tuple(slices)), value)
        return out

    def cat(self, xs: Sequence[CudaTensor], dim: int) -> CudaTensor:
        shape = list(xs[0].shape)
        shape[dim] = sum(t.shape[dim] for t in xs)
        out = self.empty(tuple(shape), xs[0].dtype)
        base = View.contiguous(tuple(shape))
        start = 0
        for t in xs:
            n = t.shape[dim]
            if n:
                region = [(0, s, 1) for s in shape]
                region[dim] = (start, start + n, 1)
                self._write(out, base.slice(tuple(region)), t)
            start += n
        return out


__all__ = ["CudaBackend"]
