"""``cube``: the portable GPU backend. It generates WGSL kernels from a small IR
and runs them through wgpu (Metal, Vulkan, DX12). Get it with ``Device.wgpu()``,
``Device.vulkan()`` or ``Device.metal()``; importing this package never touches
the GPU."""
