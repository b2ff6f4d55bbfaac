"""The CUDA runtime of one device, through CuPy: memory, one stream, modules, launches.

* **Memory**: a CuPy ``MemoryPool`` of this device (a caching allocator: freed
  blocks are kept for reuse; :meth:`CudaRuntime.empty_cache` returns them to the
  driver; :meth:`CudaRuntime.memory_stats` reports what is used and held). An
  allocation that fails after freeing the cache raises
  :class:`~ember.errors.DeviceMemoryError` naming the size and the free memory.
* **Stream**: every launch and copy goes on one non-blocking stream per device, in
  order; :meth:`CudaRuntime.sync` waits for it. Reading a value back synchronises.
* **Modules**: kernels are compiled by NVRTC (:mod:`.nvrtc`) to a cubin for this
  device's architecture (cached on disk) and loaded once.
"""

from __future__ import annotations

import ctypes
import threading
from collections import Counter
from typing import Any

import numpy as np

from ember.backend.cuda import nvrtc
from ember.errors import BackendUnavailableError, DeviceMemoryError, EmberError

_FIX = (
    "install the CUDA extra (pip install 'ember[cuda12]' or 'ember[cuda13]', matching the driver's CUDA "
    "version: nvidia-smi shows it) on a machine with an NVIDIA GPU and driver, or use Device.flex() / "
    "Device.wgpu()"
)


class CaptureUnsupported(EmberError, RuntimeError):
    """An op cannot run inside a CUDA Graph capture (the plan replays op by op)."""


class DeviceScalar:
    """A run-time scalar living at ``slot`` of a float64 device array (``table``):
    elementwise kernels read it from memory, so a captured graph sees each run's value.
    Any other use (``float()``, ``int()``, arithmetic) cannot be captured."""

    __slots__ = ("table", "slot")

    def __init__(self, table: Any, slot: int) -> None:
        self.table = table
        self.slot = slot

    def _refuse(self, *_: Any) -> Any:
        raise CaptureUnsupported("ember: cuda: a run-time scalar is used outside an elementwise kernel")

    __float__ = __int__ = __index__ = __bool__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _refuse
    __pow__ = __rpow__ = __neg__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse


def import_cupy(what: str = "Device.cuda()") -> Any:
    try:
        import cupy
    except ImportError as error:
        raise BackendUnavailableError(f"ember: {what} needs CuPy and NVRTC: {_FIX} ({error})") from None
    return cupy


def device_count() -> int:
    """CUDA devices visible (0 without a driver or GPU)."""
    try:
        cupy = import_cupy()
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


class CudaRuntime:
    """One CUDA device's memory pool, stream and loaded kernels (see the module docstring)."""

    #: Whether the stream's work can be captured as CUDA Graphs (the fusion plans' fast path).
    graphs = True

    def __init__(self, index: int) -> None:
        cupy = import_cupy(f"Device.cuda({index})")
        self.cupy = cupy
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as error:
            raise BackendUnavailableError(
                f"ember: Device.cuda({index}): no CUDA driver or GPU was found ({error}); {_FIX}"
            ) from None
        if not 0 <= index < count:
            raise BackendUnavailableError(
                f"ember: Device.cuda({index}): this machine has {count} CUDA device(s); use an index in "
                f"[0, {count - 1}]"
                if count
                else f"ember: Device.cuda({index}): no CUDA device found; {_FIX}"
            )
        self.index = index
        self.device = cupy.cuda.Device(index)
        with self.device:
            self.stream = cupy.cuda.Stream(non_blocking=True)
            self.pool = cupy.cuda.MemoryPool()
            props = cupy.cuda.runtime.getDeviceProperties(index)
        self.name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        major, minor = props["major"], props["minor"]
        self.arch = f"sm_{major}{minor}"
        self.sms = int(props["multiProcessorCount"])
        self.lock = threading.RLock()
        self.stats: Counter = Counter()
        self._functions: dict[Any, Any] = {}
        self._capture_pool: Any = None  # a graph's private pool while a step is captured
        self.capturing = False
        self._cublas: Any = None

    # ------------------------------------------------------------------ memory
    def alloc(self, nbytes: int) -> Any:
        """A device allocation of at least ``nbytes`` (a CuPy ``MemoryPointer``)."""
        pool = self._capture_pool or self.pool
        nbytes = max(int(nbytes), 1)
        with self.device:
            try:
                mem = pool.malloc(nbytes)
            except self.cupy.cuda.memory.OutOfMemoryError:
                self.stream.synchronize()
                self.pool.free_all_blocks()
                try:
                    mem = pool.malloc(nbytes)
                except self.cupy.cuda.memory.OutOfMemoryError:
                    free, total = self.cupy.cuda.runtime.memGetInfo()
                    raise DeviceMemoryError(
                        f"ember: cuda: out of GPU memory allocating {nbytes / 2**20:.1f} MiB on "
                        f"Device.cuda({self.index}) ({self.name}): {free / 2**20:.1f} MiB free of "
                        f"{total / 2**20:.1f} MiB; this process holds {self.pool.total_bytes() / 2**20:.1f} MiB "
                        "(use smaller batches, free tensors, or call device.backend.empty_cache())"
                    ) from None
        self.stats["allocs"] += 1
        return mem

    def empty_cache(self) -> None:
        """Return the pool's free blocks to the driver (``torch.cuda.empty_cache``)."""
        self.stream.synchronize()
        self.pool.free_all_blocks()

    def memory_stats(self) -> dict[str, int]:
        """``allocated`` (bytes in live tensors), ``reserved`` (held by the pool),
        ``free_device`` and ``total_device`` (the driver's view)."""
        with self.device:
            free, total = self.cupy.cuda.runtime.memGetInfo()
        return {
            "allocated": int(self.pool.used_bytes()),
            "reserved": int(self.pool.total_bytes()),
            "free_device": int(free),
            "total_device": int(total),
        }

    def upload(self, array: np.ndarray) -> Any:
        if self.capturing:  # a copy from pageable host memory cannot be captured
            raise CaptureUnsupported("ember: cuda: host data is uploaded inside a captured step")
        array = np.ascontiguousarray(array)
        mem = self.alloc(array.nbytes)
        if array.nbytes:
            with self.device:
                mem.copy_from_host_async(ctypes.c_void_p(array.ctypes.data), array.nbytes, self.stream)
        self.stats["uploads"] += 1
        self.stats["bytes_up"] += array.nbytes
        # A copy from pageable memory returns once the data is staged: ``array`` may go now.
        return mem

    def download(self, mem: Any, offset_bytes: int, out: np.ndarray) -> np.ndarray:
        if self.capturing:
            raise CaptureUnsupported("ember: cuda: a value is read back inside a captured step")
        if out.nbytes:
            with self.device:
                (mem + offset_bytes).copy_to_host_async(ctypes.c_void_p(out.ctypes.data), out.nbytes, self.stream)
                self.stream.synchronize()
        self.stats["readbacks"] += 1
        self.stats["bytes_down"] += out.nbytes
        return out

    def copy(self, dst: Any, src: Any, nbytes: int) -> None:
        if nbytes:
            with self.device:
                dst.copy_from_device_async(src, nbytes, self.stream)
        self.stats["copies"] += 1

    def memset(self, mem: Any, nbytes: int) -> None:
        if nbytes:
            with self.device:
                mem.memset_async(0, nbytes, self.stream)

    # ------------------------------------------------------------------ kernels
    def function(self, key: Any, build: Any) -> Any:
        """The loaded kernel for ``key``; ``build()`` gives ``(name, source)`` on a miss."""
        fn = self._functions.get(key)
        if fn is not None:
            return fn
        with self.lock:
            fn = self._functions.get(key)
            if fn is None:
                name, source = build()
                cubin, _ = nvrtc.compile_source(nvrtc.full_source(source), self.arch, name=f"{name}.cu")
                with self.device:
                    module = self.cupy.cuda.function.Module()
                    module.load(cubin)
                    fn = (module, module.get_function(name))
                self._functions[key] = fn
                self.stats["compiles"] += 1
        return fn

    def functions(self, key: Any, build: Any) -> dict[str, Any]:
        """The kernels of one module (a fused plan's): ``build()`` gives ``(names, source)``."""
        fns = self._functions.get(key)
        if fns is not None:
            return fns
        with self.lock:
            names, source = build()
            cubin, _ = nvrtc.compile_source(nvrtc.full_source(source), self.arch, name="plan.cu")
            with self.device:
                module = self.cupy.cuda.function.Module()
                module.load(cubin)
                fns = {name: (module, module.get_function(name)) for name in names}
            self._functions[key] = fns
            self.stats["compiles"] += 1
        return fns

    def launch(self, fn: Any, grid: int, block: int, args: tuple) -> None:
        with self.device:
            fn[1]((grid, 1, 1), (block, 1, 1), args, stream=self.stream)
        self.stats["launches"] += 1

    def gemm(self, *args: Any) -> None:
        """``cublasGemmStridedBatchedEx(handle, *args)`` on this device's stream, with a
        handle made once (host scalars; default math mode, so no TF32 for float32)."""
        from cupy_backends.cuda.libs import cublas

        with self.device:
            if self._cublas is None:
                handle = cublas.create()
                cublas.setStream(handle, self.stream.ptr)
                cublas.setPointerMode(handle, 0)
                cublas.setMathMode(handle, 0)
                self._cublas = handle
            cublas.gemmStridedBatchedEx(self._cublas, *args)
        self.stats["launches"] += 1
        self.stats["gemms"] += 1

    def sync(self) -> None:
        self.stream.synchronize()
        self.stats["syncs"] += 1


__all__ = ["CaptureUnsupported", "CudaRuntime", "DeviceScalar", "device_count", "import_cupy"]
