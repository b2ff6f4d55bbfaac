"""The wgpu device of a cube backend: buffers, uploads, read-backs and a batched
command stream.

Kernel launches are recorded into one open compute pass and submitted together
when something must wait for them (a read-back, :meth:`Runtime.sync`) or when the
batch is full. Each launch's small parameter block ("info") goes into one arena
buffer bound with a dynamic offset, uploaded once per batch.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from ember.backend.cube.adapter import describe, import_wgpu
from ember.backend.cube.errors import GpuMemoryError

INFO_WORDS = 256  # the most u32 parameters one launch may pass
_INFO_BYTES = INFO_WORDS * 4
_ARENA_BYTES = 1 << 18
_MAX_BATCH = 256  # launches per submit
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


class Runtime:
    """A wgpu device and queue, with launch batching and transfer counters."""

    def __init__(self, adapter: Any) -> None:
        wgpu = import_wgpu("cube")
        self.wgpu = wgpu
        self.adapter = adapter
        self.name = describe(adapter)
        features = ["shader-f16"] if "shader-f16" in adapter.features else []
        limits = {k: adapter.limits[k] for k in _LIMITS if k in adapter.limits}
        self.device = adapter.request_device_sync(required_features=features, required_limits=limits)
        self.queue = self.device.queue
        self.native_f16 = bool(features)
        lim = self.device.limits
        self.max_binding = int(min(lim["max-storage-buffer-binding-size"], lim["max-buffer-size"]))
        self.max_groups = int(lim["max-compute-workgroups-per-dimension"])
        self.info_align = max(int(lim["min-storage-buffer-offset-alignment"]), 16)
        self.stats: Counter[str] = Counter()
        self._usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        self._layouts: dict[tuple[int, int], Any] = {}
        info_layout = self.device.create_bind_group_layout(
            entries=[{
                "binding": 0,
                "visibility": wgpu.ShaderStage.COMPUTE,
                "buffer": {"type": wgpu.BufferBindingType.read_only_storage, "has_dynamic_offset": True},
            }]
        )
        self._info_layout = info_layout
        self._arena = self.device.create_buffer(size=_ARENA_BYTES + _INFO_BYTES, usage=self._usage)
        self._arena_group = self.device.create_bind_group(
            layout=info_layout, entries=[{"binding": 0, "resource": {"buffer": self._arena, "offset": 0, "size": _INFO_BYTES}}]
        )
        self._host_arena = np.zeros((_ARENA_BYTES + _INFO_BYTES) // 4, np.uint32)
        self._arena_pos = 0
        self._encoder: Any = None
        self._pass: Any = None
        self._batch = 0
        self._fence = self.device.create_buffer(size=4, usage=self._usage)

    # ------------------------------------------------------------------ buffers
    def _check_size(self, nbytes: int, what: str) -> int:
        size = max(4, (nbytes + 3) & ~3)
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

    def alloc(self, nbytes: int, what: str = "a tensor") -> Any:
        """A zero-filled storage buffer of at least ``nbytes`` (rounded up to 4)."""
        size = self._check_size(nbytes, what)
        try:
            buffer = self.device.create_buffer(size=size, usage=self._usage)
        except (self.wgpu.GPUOutOfMemoryError, self.wgpu.GPUValidationError) as error:
            raise self._oom(error, nbytes, what) from None
        self.stats["buffers"] += 1
        return buffer

    def upload(self, words: np.ndarray, what: str = "a tensor") -> Any:
        """A new buffer holding ``words`` (a C-contiguous array)."""
        nbytes = words.nbytes
        size = self._check_size(nbytes, what)
        if nbytes != size:
            padded = np.zeros(size, np.uint8)
            padded[:nbytes] = words.reshape(-1).view(np.uint8)
            words = padded
        try:
            buffer = self.device.create_buffer_with_data(data=words, usage=self._usage)
        except (self.wgpu.GPUOutOfMemoryError, self.wgpu.GPUValidationError) as error:
            raise self._oom(error, nbytes, what) from None
        self.stats["uploads"] += 1
        self.stats["bytes_up"] += nbytes
        return buffer

    def read(self, buffer: Any, nbytes: int) -> memoryview:
        """The first ``nbytes`` of ``buffer``, after every queued launch has run."""
        self.flush()
        size = max(4, (nbytes + 3) & ~3)
        data = self.queue.read_buffer(buffer, 0, size)
        self.stats["readbacks"] += 1
        self.stats["bytes_down"] += nbytes
        return data

    # ------------------------------------------------------------------ kernels
    def layout(self, n_in: int, n_out: int) -> Any:
        """The pipeline layout of kernels with ``n_in`` read-only and ``n_out`` written buffers."""
        key = (n_in, n_out)
        layout = self._layouts.get(key)
        if layout is None:
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
        grid when over the per-dimension limit) with ``buffers`` bound in order and
        ``info`` as its parameter block."""
        if groups <= 0:
            return
        if groups <= self.max_groups:
            self.launch3(kernel, buffers, info, (groups, 1, 1))
        else:
            self.launch3(kernel, buffers, info, (self.max_groups, -(-groups // self.max_groups), 1))

    def launch3(self, kernel: Any, buffers: list[Any], info: list[int], groups: tuple[int, int, int]) -> None:
        """Record ``kernel`` over a 3-D grid of workgroups."""
        if min(groups) <= 0:
            return
        if max(groups) > self.max_groups:
            raise RuntimeError(f"ember: cube: kernel {kernel.name} needs {groups} workgroups, over {self.max_groups} per dim")
        if len(info) > INFO_WORDS:
            raise RuntimeError(f"ember: cube: kernel {kernel.name} passes {len(info)} parameters (at most {INFO_WORDS})")
        if self._arena_pos + _INFO_BYTES > _ARENA_BYTES + _INFO_BYTES or self._batch >= _MAX_BATCH:
            self.flush()
        offset = self._arena_pos
        start = offset // 4
        self._host_arena[start:start + len(info)] = info
        self._arena_pos = offset + (-(-max(len(info) * 4, 4) // self.info_align)) * self.info_align
        group, _ = self.layout(kernel.n_in, kernel.n_out)
        bind_group = self.device.create_bind_group(
            layout=group, entries=[{"binding": i, "resource": {"buffer": b, "offset": 0, "size": b.size}} for i, b in enumerate(buffers)]
        )
        if self._pass is None:
            self._encoder = self.device.create_command_encoder()
            self._pass = self._encoder.begin_compute_pass()
        cpass = self._pass
        cpass.set_pipeline(kernel.pipeline)
        cpass.set_bind_group(0, bind_group)
        cpass.set_bind_group(1, self._arena_group, [offset])
        cpass.dispatch_workgroups(*groups)
        self._batch += 1
        self.stats["launches"] += 1

    def flush(self) -> None:
        """Submit the recorded launches."""
        if self._pass is None:
            return
        self._pass.end()
        if self._arena_pos:
            self.queue.write_buffer(self._arena, 0, self._host_arena, 0, self._arena_pos)
        self.queue.submit([self._encoder.finish()])
        self._pass = self._encoder = None
        self._arena_pos = 0
        self._batch = 0
        self.stats["submits"] += 1

    def sync(self) -> None:
        """Submit and wait until the GPU has finished every launch."""
        self.flush()
        # wgpu 0.32's queue.on_submitted_work_done_sync raises TypeError; a read-back
        # of a 4-byte buffer waits for the queue just as well.
        self.queue.read_buffer(self._fence, 0, 4)
        self.stats["syncs"] += 1
