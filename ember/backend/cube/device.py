"""``make_cube_backend``: the backend behind ``Device.wgpu/vulkan/metal``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ember.backend.cube.adapter import select_adapter

if TYPE_CHECKING:
    from ember.backend.cube.backend import CubeBackend

_BACKEND_NAMES = {"Vulkan": "Vulkan", "Metal": "Metal", "D3D12": "Dx12"}


def make_cube_backend(api: str, kind: str) -> tuple[CubeBackend, str]:
    """A cube backend on the best adapter of ``kind`` (a ``DeviceKind`` value such as
    ``"DefaultDevice"``) for ``api`` (``wgpu``, ``vulkan``, ``metal``), and the body of
    its device's repr. The adapter is chosen now (so a missing one raises at once); the
    wgpu device opens on the first op.

    Raises :class:`ember.errors.BackendUnavailableError` without wgpu or an adapter.
    """
    from ember.backend.cube.backend import CubeBackend

    adapter = select_adapter(api, kind)
    backend_type = adapter.info.get("backend_type", "Vulkan")
    backend = CubeBackend(adapter, api, kind)
    body = f"Cube(Wgpu(WgpuDevice {{ kind: {kind}, backend: {_BACKEND_NAMES.get(backend_type, backend_type)} }}))"
    return backend, body
