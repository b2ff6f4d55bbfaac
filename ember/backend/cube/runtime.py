"""The wgpu device of a cube backend: buffers, uploads, read-backs and a batched
command stream.

Kernel launches are recorded into one open compute pass and submitted together
when something must wait for them (a read-back, :meth:`Runtime.sync`) or when the
batch is full. Each launch's small parameter block ("info") goes into one arena
buffer bound with a dynamic offset, uploaded once per batch.

A *tape* (:meth:`Runtime.capture`, :meth:`Runtime.replay`) is the fast path of a
repeated sequence of launches (a compiled training step): :meth:`capture` records
the launches one thread makes (and whether it read anything back);
:meth:`replay` records prebuilt bind groups and dispatches into the open pass
with raw calls, its parameter words written once per replay into the tape's own
buffer (:meth:`info_buffer`).

Threads may share a runtime: one lock orders every use of the encoder, the queue,
the arena and the buffer pool, so launches from several threads go into the one
command stream in the order they took the lock (each thread's own launches stay in
its program order). Buffers freed by any thread come back through a queue that
needs no lock, so a garbage collection inside a locked section cannot deadlock.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter, deque
from typing import Any

import numpy as np

from ember.backend.cube.adapter import describe, import_wgpu
from ember.backend.cube.errors import GpuMemoryError

INFO_WORDS = 256  # the most u32 parameters one launch may pass
_INFO_BYTES = INFO_WORDS * 4
_ARENA_BYTES = 1 << 18
_MAX_BATCH = 256  # launches per submit
_POOL_LIMIT = 1 << 30  # bytes of free buffers kept for reuse
# Limits asked for at the adapter's maximum (wgpu's defaults are WebGPU's minimums).
_LIMITS = (
    "max-buffer-size",
    "max-storage-buffer-binding-size",
    "max-storage-buffers-per-shader-stage",
    "max-compute-workgroup-storage-size",
    "max-compute-invocations-per-workgroup",
    "max-compute-workgroups-per-dimension",
    "max-compute-workgroup-size-x",
)


class Block:
    """A device buffer owned by tensors; when the last tensor (view) holding it is
    gone, the buffer goes back to its runtime's pool for the next allocation of its
    size. Reuse is safe without waiting: later launches are ordered after earlier
    ones on the one queue, and wgpu inserts the barriers between them."""

    __slots__ = ("gpu", "_internal", "size", "_pool", "__weakref__")

    def __init__(self, gpu: Any, pool: Any) -> None:
        self.gpu = gpu
        self._internal = gpu._internal
        self.size = gpu.size
        self._pool = pool

    def __del__(self) -> None:
        pool = self._pool
        if pool is not None:
            with contextlib.suppress(Exception):  # at interpreter shutdown
                pool.put(self.gpu)


class BufferPool:
    """Free buffers by byte size, up to ``limit`` bytes in all.

    :meth:`put` may run on any thread at any moment (from a finaliser): it only
    appends to a queue. :meth:`take` and :meth:`clear` run under the runtime's lock
    and file the queued buffers first."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._free: dict[int, list[Any]] = {}
        self._returned: deque[Any] = deque()

    def _file_returned(self) -> None:
        returned = self._returned
        while returned:
            try:
                buffer = returned.popleft()
            except IndexError:  # pragma: no cover - emptied by another thread
                return
            size = buffer.size
            if buffer._internal is not None and self.held + size <= self.limit:
                self._free.setdefault(size, []).append(buffer)
                self.held += size

    def take(self, size: int) -> Any | None:
        if self._returned:
            self._file_returned()
        free = self._free.get(size)
        while free:
            self.held -= size
            buffer = free.pop()
            # A buffer pooled by a Block collected in a reference cycle may have been
            # released by its own finaliser in the same collection: skip it.
            if buffer._internal is not None:
                return buffer
        return None

    def put(self, buffer: Any) -> None:
        self._returned.append(buffer)  # atomic; filed by the next take

    def clear(self) -> None:
        self._returned.clear()
        self._free.clear()
        self.held = 0


class _RawPass:
    """A compute pass opened with a raw call (its handle, as wgpu's objects hold it)."""

    __slots__ = ("_internal",)

    def __init__(self, handle: Any) -> None:
        self._internal = handle


class _RawCalls:
    """The four calls of a launch made straight through wgpu-native's C API.

    wgpu-py wraps every C call in Python-side error capture and struct checks, which
    costs more than the call itself (about 20 us for a bind group against 3 us raw).
    Launches use already-validated pipelines and layouts, so the hot path calls the C
    functions directly; a wgpu version without these internals uses the public API.
    """

    def __init__(self, device: Any) -> None:
        from wgpu.backends.wgpu_native._api import GPUCommandEncoder
        from wgpu.backends.wgpu_native._ffi import ffi, lib

        self.ffi, self.lib = ffi, lib
        self.device = device
        self.device_id = device._internal
        self.pending: list[Any] = []
        self._encoder_class = GPUCommandEncoder

    def begin(self) -> tuple[Any, Any]:
        """A command encoder (wgpu's object: its ``finish`` reports validation errors)
        and an open compute pass on it (a raw handle), made with two raw calls (the
        public API's pair costs about 20 us)."""
        lib, ffi = self.lib, self.ffi
        encoder = self._encoder_class("", lib.wgpuDeviceCreateCommandEncoder(self.device_id, ffi.NULL), self.device)
        return encoder, _RawPass(lib.wgpuCommandEncoderBeginComputePass(encoder._internal, ffi.NULL))

    def end(self, cpass: Any) -> None:
        self.lib.wgpuComputePassEncoderEnd(cpass._internal)
        self.lib.wgpuComputePassEncoderRelease(cpass._internal)

    def bind_group(self, layout: Any, buffers: list[Any]) -> Any:
        ffi = self.ffi
        entries = ffi.new("WGPUBindGroupEntry[]", len(buffers))
        for i, buffer in enumerate(buffers):
            entry = entries[i]
            entry.binding = i
            entry.buffer = buffer._internal
            entry.offset = 0
            entry.size = buffer.size
        desc = ffi.new("WGPUBindGroupDescriptor *")
        desc.layout = layout._internal
        desc.entryCount = len(buffers)
        desc.entries = entries
        group = self.lib.wgpuDeviceCreateBindGroup(self.device_id, desc)
        self.pending.append(group)
        return group

    def record(self, cpass: Any, pipeline: Any, group: Any, info_group: Any, offset: int, groups) -> None:
        lib = self.lib
        pass_id = cpass._internal
        lib.wgpuComputePassEncoderSetPipeline(pass_id, pipeline._internal)
        lib.wgpuComputePassEncoderSetBindGroup(pass_id, 0, group, 0, self.ffi.NULL)
        lib.wgpuComputePassEncoderSetBindGroup(
            pass_id, 1, info_group._internal, 1, self.ffi.new("uint32_t[1]", [offset])
        )
        lib.wgpuComputePassEncoderDispatchWorkgroups(pass_id, *groups)

    def release(self) -> None:
        """Drop this batch's bind groups (after its submit; wgpu keeps what the GPU still needs)."""
        release = self.lib.wgpuBindGroupRelease
        for group in self.pending:
            release(group)
        self.pending.clear()


class Capture:
    """The launches one thread made while capturing: ``(kernel, blocks, info, grid)``
    each; ``read_back`` tells whether it waited for the GPU (read or synced) meanwhile.
    A *dry* capture only records: nothing is dispatched."""

    __slots__ = ("launches", "read_back", "dry")

    def __init__(self, dry: bool) -> None:
        self.launches: list[tuple[Any, list[Any], list[int], tuple[int, int, int]]] = []
        self.read_back = False
        self.dry = dry


class TapeInfo:
    """A tape's parameter words on the device: one buffer, bound with a dynamic offset
    per dispatch like the runtime's own arena."""

    __slots__ = ("buffer", "group", "encoded_at")

    def __init__(self, buffer: Any, group: Any) -> None:
        self.buffer = buffer
        self.group = group
        self.encoded_at = -1  # the submit the tape's last replay went into (see Runtime.replay)


class Runtime:
    """A wgpu device and queue, with launch batching and transfer counters."""

    def __init__(self, adapter: Any) -> None:
        wgpu = import_wgpu("cube")
        self.wgpu = wgpu
        self.adapter = adapter
        self.name = describe(adapter)
        features = [f for f in ("shader-f16", "subgroup") if f in adapter.features]
        limits = {k: adapter.limits[k] for k in _LIMITS if k in adapter.limits}
        self.device = adapter.request_device_sync(required_features=features, required_limits=limits)
        self.queue = self.device.queue
        self.native_f16 = "shader-f16" in features
        #: whether kernels may use WGSL's subgroup operations (``enable subgroups;``)
        self.subgroups = "subgroup" in features
        #: whether the adapter runs kernels on the CPU (lavapipe, SwiftShader, WARP):
        #: kernel templates that suit a GPU's memory hierarchy may lose there
        self.cpu = str(adapter.info.get("adapter_type", "")).upper() == "CPU"
        lim = self.device.limits
        self.max_binding = int(min(lim["max-storage-buffer-binding-size"], lim["max-buffer-size"]))
        self.max_groups = int(lim["max-compute-workgroups-per-dimension"])
        self.max_storage_buffers = int(lim["max-storage-buffers-per-shader-stage"])
        self.info_align = max(int(lim["min-storage-buffer-offset-alignment"]), 16)
        self.stats: Counter[str] = Counter()
        self.lock = threading.RLock()
        self._usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        self._layouts: dict[tuple[int, int], Any] = {}
        info_layout = self.device.create_bind_group_layout(
            entries=[
                {
                    "binding": 0,
                    "visibility": wgpu.ShaderStage.COMPUTE,
                    "buffer": {"type": wgpu.BufferBindingType.read_only_storage, "has_dynamic_offset": True},
                }
            ]
        )
        self._info_layout = info_layout
        self._arena = self.device.create_buffer(size=_ARENA_BYTES + _INFO_BYTES, usage=self._usage)
        self._arena_group = self.device.create_bind_group(
            layout=info_layout,
            entries=[{"binding": 0, "resource": {"buffer": self._arena, "offset": 0, "size": _INFO_BYTES}}],
        )
        self._host_arena = np.zeros((_ARENA_BYTES + _INFO_BYTES) // 4, np.uint32)
        self._arena_pos = 0
        self._encoder: Any = None
        self._pass: Any = None
        self._batch = 0
        self._fence = self.device.create_buffer(size=4, usage=self._usage)
        self._captures: dict[int, Capture] = {}
        self._released: deque[Any] = deque()  # tapes' bind groups, released after the next submit
        #: submits so far (never reset, unlike ``stats``)
        self.submit_count = 0
        self.pool = BufferPool(_POOL_LIMIT)
        try:
            self._raw: _RawCalls | None = _RawCalls(self.device)
        except (ImportError, AttributeError):  # pragma: no cover - another wgpu version
            self._raw = None

    # ------------------------------------------------------------------ buffers
    def _check_size(self, nbytes: int, what: str) -> int:
        # At least 16 bytes: a binding must hold one element of its array type (an
        # empty int64 tensor's buffer is bound as array<vec2<u32>>, 8 bytes).
        size = max(16, (nbytes + 3) & ~3)
        if size > self.max_binding:
            raise GpuMemoryError(
                f"ember: cube: {what} needs a buffer of {nbytes:,} bytes, over this adapter's limit of "
                f"{self.max_binding:,} bytes per buffer ({self.name}); split the tensor into smaller "
                "ones (e.g. .chunk(...)) or keep it on Device.flex()"
            )
        return size

    def _oom(self, error: Exception, nbytes: int, what: str) -> GpuMemoryError:
        return GpuMemoryError(
            f"ember: cube: out of GPU memory allocating {nbytes:,} bytes for {what} on {self.name} ({error}); "
            "free tensors you no longer need, use smaller batches, or move work to Device.flex()"
        )

    def alloc(self, nbytes: int, what: str = "a tensor") -> Block:
        """A storage buffer of at least ``nbytes``, from the pool when one of its size is
        free (its contents are then stale: kernels write every element they output)."""
        size = self._check_size(nbytes, what)
        size = -(-size // 256) * 256 if size > 256 else size
        with self.lock:
            buffer = self.pool.take(size)
            if buffer is None:
                buffer = self._create(size, nbytes, what)
                self.stats["buffers"] += 1
            else:
                self.stats["pool_hits"] += 1
        return Block(buffer, self.pool)

    def _create(self, size: int, nbytes: int, what: str) -> Any:
        for attempt in (0, 1):
            try:
                return self.device.create_buffer(size=size, usage=self._usage)
            except (self.wgpu.GPUOutOfMemoryError, self.wgpu.GPUValidationError) as error:
                if attempt == 0 and self.pool.held:
                    self.pool.clear()  # give the pooled memory back and try once more
                    continue
                raise self._oom(error, nbytes, what) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def upload(self, words: np.ndarray, what: str = "a tensor") -> Block:
        """A new buffer holding ``words`` (a C-contiguous array)."""
        nbytes = words.nbytes
        size = self._check_size(nbytes, what)
        if nbytes != size:
            padded = np.zeros(size, np.uint8)
            padded[:nbytes] = words.reshape(-1).view(np.uint8)
            words = padded
        with self.lock:
            try:
                buffer = self.device.create_buffer_with_data(data=words, usage=self._usage)
            except (self.wgpu.GPUOutOfMemoryError, self.wgpu.GPUValidationError) as error:
                raise self._oom(error, nbytes, what) from None
            self.stats["uploads"] += 1
            self.stats["bytes_up"] += nbytes
        return Block(buffer, self.pool)

    def empty_cache(self) -> None:
        """Release the free buffers kept for reuse."""
        with self.lock:
            self.pool.clear()

    def read(self, block: Block, nbytes: int) -> memoryview:
        """The first ``nbytes`` of ``block``, after every queued launch has run."""
        size = max(4, (nbytes + 3) & ~3)
        self._note_read_back()
        with self.lock:
            self.flush()
            data = self.queue.read_buffer(block.gpu, 0, size)
            self.stats["readbacks"] += 1
            self.stats["bytes_down"] += nbytes
        return data

    # ------------------------------------------------------------------ kernels
    def layout(self, n_in: int, n_out: int) -> Any:
        """The pipeline layout of kernels with ``n_in`` read-only and ``n_out`` written buffers."""
        key = (n_in, n_out)
        layout = self._layouts.get(key)
        if layout is None:
            with self.lock:
                return self._new_layout(key)
        return layout

    def _new_layout(self, key: tuple[int, int]) -> Any:
        layout = self._layouts.get(key)
        if layout is None:
            n_in, n_out = key
            wgpu = self.wgpu
            entries = [
                {
                    "binding": i,
                    "visibility": wgpu.ShaderStage.COMPUTE,
                    "buffer": {
                        "type": wgpu.BufferBindingType.read_only_storage if i < n_in else wgpu.BufferBindingType.storage
                    },
                }
                for i in range(n_in + n_out)
            ]
            group = self.device.create_bind_group_layout(entries=entries)
            layout = self._layouts[key] = (
                group,
                self.device.create_pipeline_layout(bind_group_layouts=[group, self._info_layout]),
            )
        return layout

    def compile(self, name: str, source: str, n_in: int, n_out: int) -> Any:
        """A compute pipeline for ``source`` (entry point ``main``)."""
        _, pipeline_layout = self.layout(n_in, n_out)
        with self.lock:
            try:
                module = self.device.create_shader_module(label=name, code=source)
                pipeline = self.device.create_compute_pipeline(
                    label=name, layout=pipeline_layout, compute={"module": module, "entry_point": "main"}
                )
            except self.wgpu.GPUError as error:  # a bug in ember's code generator
                numbered = "\n".join(f"{i + 1:4} {line}" for i, line in enumerate(source.splitlines()))
                raise RuntimeError(f"ember: cube: kernel {name!r} failed to compile: {error}\n{numbered}") from None
            self.stats["compiles"] += 1
        return pipeline

    def launch(self, kernel: Any, buffers: list[Any], info: list[int], groups: int) -> None:
        """Record ``kernel`` over ``groups`` workgroups (a linear count, spread over a 2-D
        grid when over the per-dimension limit, with fewer idle workgroups than it has
        rows) with ``buffers`` bound in order and ``info`` as its parameter block."""
        if groups <= 0:
            return
        if groups <= self.max_groups:
            self.launch3(kernel, buffers, info, (groups, 1, 1))
        else:  # as square as the rows allow: at most rows - 1 idle workgroups
            rows = -(-groups // self.max_groups)
            self.launch3(kernel, buffers, info, (-(-groups // rows), rows, 1))

    def launch3(self, kernel: Any, buffers: list[Any], info: list[int], groups: tuple[int, int, int]) -> None:
        """Record ``kernel`` over a 3-D grid of workgroups."""
        if min(groups) <= 0:
            return
        if max(groups) > self.max_groups:
            raise RuntimeError(
                f"ember: cube: kernel {kernel.name} needs {groups} workgroups, over {self.max_groups} per dim"
            )
        if len(info) > INFO_WORDS:
            raise RuntimeError(
                f"ember: cube: kernel {kernel.name} passes {len(info)} parameters (at most {INFO_WORDS})"
            )
        group, _ = self.layout(kernel.n_in, kernel.n_out)
        if self._captures:
            capture = self._captures.get(threading.get_ident())
            if capture is not None:
                capture.launches.append((kernel, list(buffers), list(info), groups))  # a tuple: immutable, no copy
                if capture.dry:
                    return
        with self.lock:
            if self._arena_pos + _INFO_BYTES > _ARENA_BYTES + _INFO_BYTES or self._batch >= _MAX_BATCH:
                self.flush()
            offset = self._arena_pos
            start = offset // 4
            self._host_arena[start : start + len(info)] = info
            self._arena_pos = offset + (-(-max(len(info) * 4, 4) // self.info_align)) * self.info_align
            if self._pass is None:
                self._begin()
            cpass = self._pass
            raw = self._raw
            if raw is not None:
                raw.record(cpass, kernel.pipeline, raw.bind_group(group, buffers), self._arena_group, offset, groups)
            else:
                bind_group = self.device.create_bind_group(
                    layout=group, entries=[{"binding": i, "resource": b.gpu} for i, b in enumerate(buffers)]
                )
                cpass.set_pipeline(kernel.pipeline)
                cpass.set_bind_group(0, bind_group)
                cpass.set_bind_group(1, self._arena_group, [offset])
                cpass.dispatch_workgroups(*groups)
            self._batch += 1
            self.stats["launches"] += 1

    def _begin(self) -> None:
        """Opens the encoder and its compute pass (under the lock)."""
        if self._raw is not None:
            self._encoder, self._pass = self._raw.begin()
        else:
            self._encoder = self.device.create_command_encoder()
            self._pass = self._encoder.begin_compute_pass()

    def flush(self) -> None:
        """Submit the recorded launches."""
        if self._pass is None:
            return
        with self.lock:
            if self._pass is None:
                return
            if self._raw is not None:
                self._raw.end(self._pass)
            else:
                self._pass.end()
            if self._arena_pos:
                self.queue.write_buffer(self._arena, 0, self._host_arena, 0, self._arena_pos)
            self.queue.submit([self._encoder.finish()])
            if self._raw is not None:
                while self._released:
                    self._raw.pending.append(self._released.popleft())
                self._raw.release()
            self._pass = self._encoder = None
            self._arena_pos = 0
            self._batch = 0
            self.submit_count += 1
            self.stats["submits"] += 1

    def sync(self) -> None:
        """Submit and wait until the GPU has finished every launch."""
        self._note_read_back()
        with self.lock:
            self.flush()
            # wgpu 0.32's queue.on_submitted_work_done_sync raises TypeError; a read-back
            # of a 4-byte buffer waits for the queue just as well.
            self.queue.read_buffer(self._fence, 0, 4)
            self.stats["syncs"] += 1

    # ------------------------------------------------------------------ tapes
    @contextlib.contextmanager
    def capture(self, dry: bool = False) -> Any:
        """Records the launches the calling thread makes inside the ``with`` block (other
        threads' launches run as usual); a ``dry`` capture dispatches nothing. Yields
        the :class:`Capture`."""
        thread = threading.get_ident()
        if thread in self._captures:
            raise RuntimeError("ember: cube: a capture is already open on this thread")
        capture = Capture(dry)
        with self.lock:
            self._captures = {**self._captures, thread: capture}
        try:
            yield capture
        finally:
            with self.lock:
                self._captures = {k: v for k, v in self._captures.items() if k != thread}

    def _note_read_back(self) -> None:
        if self._captures:
            capture = self._captures.get(threading.get_ident())
            if capture is not None:
                capture.read_back = True

    @property
    def tapes(self) -> bool:
        """Whether :meth:`replay` is available (wgpu-native's C API is reachable)."""
        return self._raw is not None

    def info_buffer(self, nbytes: int) -> TapeInfo:
        """A tape's parameter buffer of ``nbytes`` (plus room for one launch's block
        past the last offset) and its bind group."""
        size = -(-(nbytes + _INFO_BYTES) // 16) * 16
        with self.lock:
            buffer = self.device.create_buffer(size=size, usage=self._usage)
            group = self.device.create_bind_group(
                layout=self._info_layout,
                entries=[{"binding": 0, "resource": {"buffer": buffer, "offset": 0, "size": _INFO_BYTES}}],
            )
        return TapeInfo(buffer, group)

    def bind_group(self, n_in: int, n_out: int, buffers: list[Any]) -> Any:
        """A bind group of ``buffers`` (wgpu buffers or blocks) for kernels with ``n_in``
        inputs and ``n_out`` outputs, kept until :meth:`release` (a raw handle)."""
        raw = self._raw
        assert raw is not None, "tapes need wgpu-native's C API (check Runtime.tapes first)"
        group_layout, _ = self.layout(n_in, n_out)
        with self.lock:
            group = raw.bind_group(group_layout, buffers)
            raw.pending.pop()  # a tape's: not released with the batch
        return group

    def release(self, groups: list[Any]) -> None:
        """Hands bind groups made by :meth:`bind_group` back; they are released after the
        next submit. Takes no lock (a finaliser may call it)."""
        self._released.extend(groups)

    def replay(
        self,
        info: TapeInfo,
        words: np.ndarray,
        pipelines: list[Any],
        groups: list[Any],
        offsets: Any,
        grids: list[tuple[int, int, int]],
    ) -> None:
        """Records a tape's dispatches into the open pass: dispatch ``i`` runs pipeline
        ``pipelines[i]`` (a raw handle) with bind group ``groups[i]`` and parameter
        words at ``offsets[i]`` (a C array of byte offsets) in ``info``, whose contents
        become ``words``. A replay whose previous one is still in the open batch submits
        that batch first (its words would be overwritten before it ran)."""
        raw = self._raw
        assert raw is not None, "tapes need wgpu-native's C API (check Runtime.tapes first)"
        lib, ffi = raw.lib, raw.ffi
        with self.lock:
            if info.encoded_at == self.submit_count and self._pass is not None:
                self.flush()
            lib.wgpuQueueWriteBuffer(
                self.queue._internal, info.buffer._internal, 0, ffi.from_buffer(words), words.nbytes
            )
            if self._pass is None:
                self._begin()
            pass_id = self._pass._internal
            set_pipeline = lib.wgpuComputePassEncoderSetPipeline
            set_group = lib.wgpuComputePassEncoderSetBindGroup
            dispatch = lib.wgpuComputePassEncoderDispatchWorkgroups
            info_group = info.group._internal
            last = None
            for i, pipeline in enumerate(pipelines):
                if pipeline is not last:
                    set_pipeline(pass_id, pipeline)
                    last = pipeline
                set_group(pass_id, 0, groups[i], 0, ffi.NULL)
                set_group(pass_id, 1, info_group, 1, offsets + i)
                x, y, z = grids[i]
                dispatch(pass_id, x, y, z)
            info.encoded_at = self.submit_count
            self.stats["launches"] += len(pipelines)
            self.stats["replayed"] += len(pipelines)
