"""``cube``: the portable GPU backend (Burn's CubeCL backend, in Python).

It generates WGSL compute kernels and runs them through the ``wgpu`` package
(wgpu-native: Metal on macOS, Vulkan on Linux, DX12 on Windows). Get a device with
``Device.wgpu(kind)``, ``Device.vulkan(kind)`` or ``Device.metal(kind)``; importing
this package never touches the GPU (the adapter is chosen when a device is made,
the wgpu device opens on its first op).

Layout of the package:

* ``adapter``/``device``: choosing an adapter for a ``DeviceKind``, the ``Device``.
* ``runtime``: the wgpu device, pooled buffers, batched launches (submitted at a
  read-back or ``sync``), counters; ``cache``: kernels by key, compiled once.
* ``dtypes``: how each dtype lives in WGSL words (int64 in two 32-bit words, bool in ``u32``,
  float16 native with ``shader-f16`` or in words, bfloat16 in words; no float64).
* ``buffer``: ``CubeTensor``, a strided view (layout ops are free).
* ``ir`` + ``wgsl``: the elementwise expression IR and the WGSL it becomes.
* ``kernels/``: elementwise, reduce (+ softmax), matmul, layout, index, scan, sort,
  random (Philox), module (conv, pooling), optim (Adam, MSE).
"""
