"""``cube``: the GPU backend. Its primitive is a :class:`CubeTensor` (a strided view
of a wgpu buffer); every op runs a WGSL kernel generated for it and cached.

The wgpu device is created on the first op (or :meth:`CubeBackend.ensure_ready`),
never at import. Launches are batched and submitted when a value is read back or
:meth:`sync` is called. :meth:`stats` counts compiles, launches, submits and
transfers for tests and benchmarks.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.backend.base import Backend, Slices
from ember.backend.composites.quantized import fake_quantize_int8
from ember.backend.cube import ir, spectral
from ember.backend.cube.buffer import CubeTensor
from ember.backend.cube.cache import KernelCache
from ember.backend.cube.dtypes import Storage, check_scalar, storage_for
from ember.backend.cube.kernels import (
    elementwise,
    index,
    layout,
    matmul,
    module,
    optim,
    quant_matmul,
    random,
    reduce,
    scan,
    sort,
)
from ember.backend.cube.runtime import Runtime
from ember.backend.distribution import Distribution
from ember.backend.dtype import DType
from ember.backend.ops import ArgReduceOp, BinaryOp, ComplexOp, CumulativeOp, FftOp, ReduceOp, UnaryOp
from ember.errors import BackendUnavailableError

if TYPE_CHECKING:
    from ember.backend.cube.kernels.context import KernelContext

_INT = ("i32", "i64")


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(*shapes))


class CubeBackend(Backend):
    """GPU backend over wgpu (Vulkan, Metal, DX12) with generated WGSL kernels.

    The matrix decompositions and solves (``linalg``, ``ember.linalg``) are not kernels
    here: :meth:`Backend.linalg`'s default reads the operands back (device -> host), runs
    numpy's LAPACK on them and uploads the results (host -> device), one sync per call.
    """

    name = "cube"
    fusion_target = "wgsl"  # fused WGSL kernels, tapes of repeated plans

    def __init__(self, adapter: Any, api: str = "wgpu", kind: str = "DefaultDevice") -> None:
        self.adapter = adapter
        self.api = api
        self.kind = kind
        self._runtime: Runtime | None = None
        self._cache: KernelCache | None = None
        self.plans: dict[Any, Any] = {}
        self._ready_lock = threading.Lock()

    # ------------------------------------------------------------------ device
    def ensure_ready(self) -> Runtime:
        """Create the wgpu device (once); raises :class:`BackendUnavailableError` on failure."""
        runtime = self._runtime
        if runtime is None:
            with self._ready_lock:
                runtime = self._runtime
                if runtime is None:
                    runtime = self._open()
        return runtime

    def _open(self) -> Runtime:
        try:
            runtime = Runtime(self.adapter)
        except BackendUnavailableError:
            raise
        except Exception as error:
            raise BackendUnavailableError(
                f"ember: cube: could not open a wgpu device on the adapter {self.adapter.info.get('device')!r}: {error}"
            ) from None
        self._cache = KernelCache(runtime)
        self._runtime = runtime
        return runtime

    @property
    def runtime(self) -> Runtime:
        return self._runtime if self._runtime is not None else self.ensure_ready()

    @property
    def cache(self) -> KernelCache:
        cache = self._cache
        if cache is None:
            self.ensure_ready()
            cache = self._cache
            assert cache is not None  # opened with the runtime
        return cache

    def stats(self) -> dict[str, int]:
        """Counters: ``compiles``, ``cache_hits``, ``launches``, ``submits``, ``uploads``,
        ``readbacks``, ``bytes_up``, ``bytes_down``, ``buffers`` (created), ``pool_hits``
        (reused), ``syncs``, and ``kernels`` (in the cache)."""
        names = (
            "compiles",
            "cache_hits",
            "launches",
            "submits",
            "uploads",
            "readbacks",
            "bytes_up",
            "bytes_down",
            "buffers",
            "pool_hits",
            "syncs",
        )
        counts = {name: self.runtime.stats[name] for name in names}
        counts["kernels"] = len(self.cache)
        return counts

    def reset_stats(self) -> None:
        self.runtime.stats.clear()

    def empty_cache(self) -> None:
        """Release the free GPU buffers kept for reuse (``torch.cuda.empty_cache``)."""
        self.runtime.empty_cache()

    def check_dtype(self, dtype: np.dtype) -> None:
        storage_for(DType.from_numpy(dtype), False)  # raises for float64, naming the fix

    def storage(self, dtype: DType) -> Storage:
        return storage_for(dtype, self.runtime.native_f16)

    def storage_f32(self) -> Storage:
        return storage_for(DType.FLOAT32, False)

    def empty(self, shape: tuple[int, ...], storage: Storage) -> CubeTensor:
        """A new zero-filled contiguous tensor."""
        n = math.prod(shape)
        return CubeTensor(self.runtime.alloc(n * storage.itemsize), tuple(shape), storage)

    def contiguous(self, x: CubeTensor) -> CubeTensor:
        return layout.contiguous(self, x)

    # ------------------------------------------------------------------ data boundary
    def from_numpy(self, array: np.ndarray) -> CubeTensor:
        dtype = DType.from_numpy(array.dtype)
        storage = self.storage(dtype)
        bounds = None
        if storage.compute in _INT and array.size:
            bounds = (int(array.min()), int(array.max()))
        buffer = self.runtime.upload(storage.to_words(array))
        return CubeTensor(buffer, tuple(array.shape), storage, bounds=bounds)

    def to_numpy(self, x: CubeTensor) -> np.ndarray:
        storage = x.storage
        if x.size == 0:
            return np.zeros(x.shape, storage.np)
        x = layout.contiguous(self, x)
        data = self.runtime.read(x.buffer, x.size * storage.itemsize)
        words = np.frombuffer(data, dtype=storage.host, count=x.size)
        return storage.from_words(words).reshape(x.shape)

    # ------------------------------------------------------------------ creation
    def full(self, shape, value, dtype: DType) -> CubeTensor:
        storage = self.storage(dtype)
        ctype = storage.compute
        if ctype in _INT:
            value = int(value)
            check_scalar("full", value, storage)
        out = elementwise.run(self, ir.scalar(0, ctype), [], storage, tuple(shape), [value], [ctype])
        if ctype in _INT:
            out.bounds = (value, value)
        return out

    def arange(self, start, stop, step, dtype: DType) -> CubeTensor:
        n = len(range(start, stop, step))
        last = start + (n - 1) * step if n else start
        storage = self.storage(dtype)
        position = ir.binary(BinaryOp.MUL, ir.convert(ir.index(), "i64"), ir.scalar(1, "i64"))
        expr = ir.convert(ir.binary(BinaryOp.ADD, ir.scalar(0, "i64"), position), storage.compute)
        out = elementwise.run(self, expr, [], storage, (n,), [start, step], ["i64", "i64"])
        if storage.compute in _INT and n:
            out.bounds = (min(start, last), max(start, last))
        return out

    def random(self, shape, distribution: Distribution, dtype: DType, key: int, counter: int) -> CubeTensor:
        return random.sample(self, tuple(shape), distribution, self.storage(dtype), key, counter)

    def sync(self) -> None:
        if self._runtime is not None:
            self._runtime.sync()

    # ------------------------------------------------------------------ elementwise
    def unary(self, op: UnaryOp, x: CubeTensor) -> CubeTensor:
        expr = ir.unary(op, ir.load(0, x.storage.compute))
        out_storage = self.storage(DType.BOOL) if ir.type_of(expr) == "bool" else x.storage
        return elementwise.run(self, expr, [x], out_storage, x.shape)

    def _operand(self, op: str, value, storage: Storage, position: int, inputs: list, scalars: list, types: list):
        """An IR leaf for a tensor or Python-scalar operand, collecting launch arguments."""
        if isinstance(value, CubeTensor):
            inputs.append(value)
            return ir.load(len(inputs) - 1, value.storage.compute)
        check_scalar(op, value, storage)
        scalars.append(value)
        types.append(storage.compute)
        return ir.scalar(len(scalars) - 1, storage.compute)

    def binary(self, op: BinaryOp, a: CubeTensor, b) -> CubeTensor:
        inputs: list[CubeTensor] = [a]
        scalars: list = []
        types: list[str] = []
        left = ir.load(0, a.storage.compute)
        right = self._operand(op, b, a.storage, 1, inputs, scalars, types)
        expr = ir.binary(op, left, right)
        out_storage = self.storage(DType.BOOL) if ir.type_of(expr) == "bool" else a.storage
        shape = _broadcast(a.shape, b.shape) if isinstance(b, CubeTensor) else a.shape
        return elementwise.run(self, expr, inputs, out_storage, shape, scalars, types)

    def where(self, cond: CubeTensor, a, b) -> CubeTensor:
        storage = a.storage if isinstance(a, CubeTensor) else b.storage
        inputs: list[CubeTensor] = [cond]
        scalars: list = []
        types: list[str] = []
        left = self._operand("where", a, storage, 1, inputs, scalars, types)
        right = self._operand("where", b, storage, 2, inputs, scalars, types)
        expr = ir.select(ir.load(0, "bool"), left, right)
        shape = _broadcast(*(x.shape for x in inputs))
        return elementwise.run(self, expr, inputs, storage, shape, scalars, types)

    def clamp(self, x: CubeTensor, low, high) -> CubeTensor:
        inputs: list[CubeTensor] = [x]
        scalars: list = []
        types: list[str] = []
        expr = ir.load(0, x.storage.compute)
        if low is not None:
            expr = ir.binary(BinaryOp.MAXIMUM, expr, self._operand("clamp", low, x.storage, 1, inputs, scalars, types))
        if high is not None:
            expr = ir.binary(BinaryOp.MINIMUM, expr, self._operand("clamp", high, x.storage, 2, inputs, scalars, types))
        return elementwise.run(self, expr, inputs, x.storage, x.shape, scalars, types)

    def cast(self, x: CubeTensor, dtype: DType) -> CubeTensor:
        storage = self.storage(dtype)
        if storage == x.storage:
            return x
        if storage.wgsl == x.storage.wgsl == "i32" and storage.store == "{v}":
            # uint8 values are int32 words already.
            return CubeTensor(x.buffer, x.shape, storage, x.strides, x.offset, x.bounds)
        expr = ir.convert(ir.load(0, x.storage.compute), storage.compute)
        out = elementwise.run(self, expr, [x], storage, x.shape)
        if dtype is DType.INT64 and x.bounds is not None:  # widening keeps every value
            out.bounds = x.bounds
        return out

    # ------------------------------------------------------------------ matmul
    def matmul(self, a: CubeTensor, b: CubeTensor) -> CubeTensor:
        if a.storage.compute == "c64":
            return spectral.complex_matmul(self, a, b)
        return matmul.matmul(self, a, b)

    # ------------------------------------------------------------------ reductions
    def reduce(self, op: ReduceOp, x: CubeTensor, dim: int) -> CubeTensor:
        if x.storage.compute == "c64":  # sum and mean (the tensor layer refuses the others)
            return spectral.by_parts(self, lambda p: reduce.reduce(self, op, p, dim), x)
        return reduce.reduce(self, op, x, dim)

    def arg_reduce(self, op: ArgReduceOp, x: CubeTensor, dim: int) -> CubeTensor:
        return reduce.arg_reduce(self, op, x, dim)

    def cumulative(self, op: CumulativeOp, x: CubeTensor, dim: int) -> CubeTensor:
        if x.storage.compute == "c64":  # cumsum (the tensor layer refuses the others)
            return spectral.by_parts(self, lambda p: scan.cumulative(self, op, p, dim), x)
        return scan.cumulative(self, op, x, dim)

    def argsort(self, x: CubeTensor, dim: int, descending: bool) -> CubeTensor:
        return sort.argsort(self, x, dim, descending)

    # ------------------------------------------------------------------ layout
    def reshape(self, x: CubeTensor, shape) -> CubeTensor:
        return layout.reshape(self, x, tuple(shape))

    def permute(self, x: CubeTensor, axes) -> CubeTensor:
        return layout.permute(x, axes)

    def flip(self, x: CubeTensor, axes) -> CubeTensor:
        return layout.flip(x, axes)

    def expand(self, x: CubeTensor, shape) -> CubeTensor:
        return layout.expand(x, tuple(shape))

    def slice(self, x: CubeTensor, slices: Slices) -> CubeTensor:
        return layout.slice_view(x, slices)

    def slice_assign(self, x: CubeTensor, slices: Slices, value: CubeTensor) -> CubeTensor:
        return layout.slice_assign(self, x, slices, value)

    def cat(self, xs: Sequence[CubeTensor], dim: int) -> CubeTensor:
        return layout.cat(self, xs, dim)

    # ------------------------------------------------------------------ indexing
    def gather(self, x: CubeTensor, dim: int, indices: CubeTensor) -> CubeTensor:
        return index.gather(self, x, dim, indices)

    def scatter_add(self, x: CubeTensor, dim: int, indices: CubeTensor, values: CubeTensor) -> CubeTensor:
        if x.storage.compute == "c64":
            (xr, xi), (vr, vi) = spectral.parts(self, x), spectral.parts(self, values)
            return self.complex(
                index.scatter_add(self, xr, dim, indices, vr), index.scatter_add(self, xi, dim, indices, vi)
            )
        return index.scatter_add(self, x, dim, indices, values)

    def select(self, x: CubeTensor, dim: int, indices: CubeTensor) -> CubeTensor:
        return index.select(self, x, dim, indices)

    def select_add(self, x: CubeTensor, dim: int, indices: CubeTensor, values: CubeTensor) -> CubeTensor:
        if x.storage.compute == "c64":
            (xr, xi), (vr, vi) = spectral.parts(self, x), spectral.parts(self, values)
            return self.complex(
                index.select_add(self, xr, dim, indices, vr), index.select_add(self, xi, dim, indices, vi)
            )
        return index.select_add(self, x, dim, indices, values)

    def argwhere(self, x: CubeTensor) -> CubeTensor:
        return index.argwhere(self, x)

    # ------------------------------------------------------------------ complex and spectral
    def complex_unary(self, op: ComplexOp, x: CubeTensor) -> CubeTensor:
        return spectral.complex_unary(self, op, x)

    def complex(self, real: CubeTensor, imag: CubeTensor) -> CubeTensor:
        return spectral.complex(self, real, imag)

    def fft(self, op: FftOp, x: CubeTensor, sizes: tuple[int, ...], dims: tuple[int, ...], norm: str) -> CubeTensor:
        return spectral.fft(self, op, x, sizes, dims, norm)

    # ------------------------------------------------------------------ fused
    def _fused_unary(self, op: str, x: CubeTensor) -> CubeTensor:
        """A one-operand kernel of cube's unary table that is no ``UnaryOp`` (``relu``,
        ``sigmoid``): ``unary``'s launch, with the output in ``x``'s storage."""
        return elementwise.run(self, ir.unary(op, ir.load(0, x.storage.compute)), [x], x.storage, x.shape)

    def relu(self, x: CubeTensor) -> CubeTensor:
        return self._fused_unary("relu", x)

    def sigmoid(self, x: CubeTensor) -> CubeTensor:
        if x.storage.compute != "f32":
            return NotImplemented
        return self._fused_unary("sigmoid", x)

    def softmax(self, x: CubeTensor, dim: int) -> CubeTensor:
        return reduce.softmax(self, x, dim, log=False)

    def log_softmax(self, x: CubeTensor, dim: int) -> CubeTensor:
        return reduce.softmax(self, x, dim, log=True)

    def linear(self, x: CubeTensor, weight: CubeTensor, bias: CubeTensor | None) -> CubeTensor:
        return matmul.matmul(self, x, weight, bias)

    def quantized_linear(self, x, values, scales, zero_points, bias, input_scale, value, group, activations):
        if activations:  # the input on its int8 grid, then the packed weight in registers
            x = fake_quantize_int8(self, x, input_scale)
        out = quant_matmul.quantized_linear(self, x, values, scales, zero_points, bias, value, group)
        return NotImplemented if out is None else out

    def adam_step_many(self, params, grads, moments_1, moments_2, max_moments_2, **options):
        return optim.adam_step_many(self, params, grads, moments_1, moments_2, max_moments_2, **options)

    def mse_loss(self, pred: CubeTensor, target: CubeTensor, mean: bool) -> CubeTensor:
        return optim.mse_loss(self, pred, target, mean)

    # ------------------------------------------------------------------ module ops
    def conv(self, x, weight, bias, stride, padding, dilation, groups):
        return module.conv(self, x, weight, bias, stride, padding, dilation, groups)

    def conv_transpose(self, x, weight, bias, stride, padding, output_padding, dilation, groups):
        return module.conv_transpose(self, x, weight, bias, stride, padding, output_padding, dilation, groups)

    def conv_weight_grad(self, x, grad, weight_shape, stride, padding, dilation, groups):
        return module.conv_weight_grad(self, x, grad, weight_shape, stride, padding, dilation, groups)

    def max_pool(self, x, kernel, stride, padding, dilation, ceil_mode):
        return module.max_pool_with_indices(self, x, kernel, stride, padding, dilation, ceil_mode)[0]

    def max_pool_with_indices(self, x, kernel, stride, padding, dilation, ceil_mode):
        return module.max_pool_with_indices(self, x, kernel, stride, padding, dilation, ceil_mode)

    def max_pool_backward(self, grad, indices, input_shape):
        out = module.max_pool_backward(self, grad, indices, input_shape)
        return super().max_pool_backward(grad, indices, input_shape) if out is NotImplemented else out

    def avg_pool(self, x, kernel, stride, padding, count_include_pad, ceil_mode):
        out = module.avg_pool(self, x, kernel, stride, padding, count_include_pad, ceil_mode)
        if out is NotImplemented:
            return super().avg_pool(x, kernel, stride, padding, count_include_pad, ceil_mode)
        return out

    def avg_pool_backward(self, grad, input_shape, kernel, stride, padding, count_include_pad, ceil_mode):
        out = module.avg_pool_backward(self, grad, input_shape, kernel, stride, padding, count_include_pad, ceil_mode)
        if out is NotImplemented:
            return super().avg_pool_backward(grad, input_shape, kernel, stride, padding, count_include_pad, ceil_mode)
        return out

    def embedding(self, weights, indices):
        return module.embedding(self, weights, indices)


if TYPE_CHECKING:

    def _gives_kernels_their_context(backend: CubeBackend) -> KernelContext:
        return backend  # the checker verifies that CubeBackend has what the kernels use
