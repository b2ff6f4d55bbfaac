"""Choosing a wgpu adapter for a device kind and a native API."""

from __future__ import annotations

import sys
from typing import Any

from ember.errors import BackendUnavailableError

WGPU_VERSION = "0.32.0"
# The backends each API name accepts, in order of preference.
_APIS = {
    "wgpu": ("Metal", "Vulkan", "D3D12"),
    "vulkan": ("Vulkan",),
    "metal": ("Metal",),
}
# Adapter types each DeviceKind accepts, best first.
_KINDS = {
    "DefaultDevice": ("DiscreteGPU", "IntegratedGPU", "VirtualGPU", "CPU", "Unknown"),
    "DiscreteGpu": ("DiscreteGPU",),
    "IntegratedGpu": ("IntegratedGPU",),
    "Cpu": ("CPU",),
}


def install_hint() -> str:
    hint = f"pip install wgpu=={WGPU_VERSION}"
    if sys.platform.startswith("linux"):
        hint += (
            "; for a GPU without drivers (or none at all) install Mesa's Vulkan drivers: "
            "apt-get install -y mesa-vulkan-drivers libvulkan1"
        )
    return hint


def import_wgpu(call: str) -> Any:
    try:
        import wgpu
    except ImportError as error:
        raise BackendUnavailableError(
            f"ember: {call}: the GPU backend needs the wgpu package ({error}); {install_hint()}"
        ) from None
    return wgpu


def describe(adapter: Any) -> str:
    info = adapter.info
    return f"{info.get('device') or info.get('description')} ({info.get('adapter_type')}, {info.get('backend_type')})"


def select_adapter(api: str, kind: str) -> Any:
    """The best adapter of ``kind`` (a DeviceKind value) on ``api``; raises
    :class:`BackendUnavailableError` naming what was found and how to install one."""
    call = f"Device.{api}(DeviceKind {kind})"
    wgpu = import_wgpu(call)
    try:
        adapters = wgpu.gpu.enumerate_adapters_sync()
    except Exception as error:  # the native library or loader failed to start
        raise BackendUnavailableError(
            f"ember: {call}: wgpu could not list adapters ({error}); {install_hint()}"
        ) from None
    backends, types = _APIS[api], _KINDS[kind]
    ranked = [
        (types.index(a.info.get("adapter_type")), backends.index(a.info.get("backend_type")), i, a)
        for i, a in enumerate(adapters)
        if a.info.get("adapter_type") in types and a.info.get("backend_type") in backends
    ]
    if not ranked:
        found = ", ".join(describe(a) for a in adapters) or "none"
        raise BackendUnavailableError(
            f"ember: {call}: no {kind} adapter on {'/'.join(backends)} was found (adapters found: {found}); "
            f"install a GPU driver or choose another DeviceKind; {install_hint()}"
        )
    return min(ranked, key=lambda r: r[:3])[3]
