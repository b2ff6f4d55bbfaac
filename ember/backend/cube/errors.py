"""Errors of the GPU backend."""

from __future__ import annotations

from ember.errors import DeviceMemoryError

#: The name the cube backend raises; an alias of :class:`ember.errors.DeviceMemoryError`.
GpuMemoryError = DeviceMemoryError

__all__ = ["GpuMemoryError"]
