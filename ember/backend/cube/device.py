"""``make_cube_device``: the :class:`ember.Device` behind ``Device.wgpu/vulkan/metal``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ember.backend.cube.adapter import select_adapter

if TYPE_CHECKING:
    from ember.device import Device, DeviceKind

_BACKEND_NAMES = {"Vulkan": "Vulkan", "Metal": "Metal", "D3D12": "Dx12"}


def make_cube_device(api: str, kind: DeviceKind) -> Device:
    """A cube device on the best adapter of ``kind`` for ``api`` (``wgpu``, ``vulkan``,
    ``metal``). The adapter is chosen now (so a missing one raises at once); the wgpu
    device opens on the first op.

    Raises :class:`ember.errors.BackendUnavailableError` without wgpu or an adapter.
    """
    from ember.backend.cube.backend import CubeBackend
    from ember.device import Device

    adapter = select_adapter(api, kind.value)
    backend_type = adapter.info.get("backend_type", "Vulkan")
    backend = CubeBackend(adapter, api, kind.value)
    body = f"Cube(Wgpu(WgpuDevice {{ kind: {kind.value}, backend: {_BACKEND_NAMES.get(backend_type, backend_type)} }}))"
    return Device(backend, ("cube", api, kind), body)
