"""Errors of the GPU backend that ``ember.errors`` has no class for."""

from __future__ import annotations

from ember.errors import EmberError


class GpuMemoryError(EmberError, MemoryError):
    """A buffer is larger than the adapter allows, or the device is out of memory."""
