"""Devices: which backend stack a tensor's ops run on."""

from ember.device.device import Device, DeviceKind

__all__ = ["Device", "DeviceKind"]
