"""Cube devices: reprs, adapters and their errors, laziness, moving tensors."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest

from ember import Device, DeviceKind, Tensor
from ember.backend.cube import adapter
from ember.errors import BackendUnavailableError


def test_repr_and_interning(gpu):
    api = gpu.backend.runtime.adapter.info["backend_type"].replace("D3D12", "Dx12")
    assert repr(gpu) == f"Device<Cube(Wgpu(WgpuDevice {{ kind: DefaultDevice, backend: {api} }}))>"
    assert Device.wgpu() is gpu and Device.wgpu(DeviceKind.DEFAULT) is gpu
    assert repr(gpu.autodiff()).startswith("Device<Autodiff { device: Cube(Wgpu(WgpuDevice { kind: DefaultDevice")
    assert Device.parse(gpu.spec()) is gpu and gpu.spec() == "wgpu:default"
    assert pickle.loads(pickle.dumps(gpu.autodiff())) is gpu.autodiff()


def test_every_kind_gives_a_device_or_a_clear_error(gpu):
    for api in ("wgpu", "vulkan", "metal"):
        for kind in DeviceKind:
            try:
                device = getattr(Device, api)(kind)
            except BackendUnavailableError as error:
                message = str(error)
                assert message.startswith(f"ember: Device.{api}(DeviceKind {kind.value})")
                assert "pip install wgpu" in message and "adapters found" in message
                if sys.platform.startswith("linux"):
                    assert "apt-get install -y mesa-vulkan-drivers libvulkan1" in message
                continue
            assert f"kind: {kind.value}" in repr(device)
            assert Tensor.ones([2], device=device).sum().into_scalar() == 2.0


def test_missing_wgpu_names_the_install_step(monkeypatch):
    monkeypatch.setitem(sys.modules, "wgpu", None)
    with pytest.raises(BackendUnavailableError, match="pip install wgpu=="):
        adapter.select_adapter("wgpu", "DefaultDevice")


def test_importing_ember_never_touches_the_gpu():
    code = "import sys, ember; ember.Tensor.ones([2], device=ember.Device.flex()); print('wgpu' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_to_device_between_flex_and_cube(gpu):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = Tensor.from_data(x, device=Device.flex())
    on_gpu = t.to_device(gpu)
    assert on_gpu.device is gpu and on_gpu.to_numpy().tolist() == x.tolist()
    back = on_gpu.transpose().to_device(Device.flex())
    assert back.device is Device.flex() and back.to_numpy().tolist() == x.T.tolist()
    tracked = Tensor.from_data(x, device=Device.flex().autodiff()).require_grad()
    moved = tracked.to_device(gpu.autodiff())
    grads = moved.mul_scalar(3.0).sum().backward()
    assert tracked.grad(grads).to_numpy().tolist() == [[3.0] * 3] * 2


def test_sync_waits_and_submits(gpu, backend):
    a = Tensor.ones([1000], device=gpu)
    before = backend.stats()
    b = a.add_scalar(1.0).mul_scalar(2.0)
    mid = backend.stats()
    assert mid["launches"] - before["launches"] == 2
    assert mid["submits"] == before["submits"]  # recorded, not yet submitted
    gpu.sync()
    after = backend.stats()
    assert after["submits"] == mid["submits"] + 1 and after["syncs"] == mid["syncs"] + 1
    assert b.sum().into_scalar() == 4000.0
