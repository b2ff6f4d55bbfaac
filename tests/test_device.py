"""Devices: identity, reprs, default selection, seeds."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from ember import Device, DeviceKind, Tensor
from ember.backend.autodiff import Checkpointing
from ember.errors import BackendUnavailableError, DeviceError


def test_reprs():
    assert repr(Device.flex()) == "Device<Flex(Cpu)>"
    assert repr(Device.flex().autodiff()) == "Device<Autodiff { device: Flex(Cpu), checkpointing: Disabled }>"
    assert (
        repr(Device.flex().autodiff(Checkpointing.BALANCED))
        == "Device<Autodiff { device: Flex(Cpu), checkpointing: Balanced }>"
    )


def test_identity_equality_hash():
    assert Device.flex() is Device.flex()
    assert Device.flex() == Device.flex()
    assert Device.flex().autodiff() is Device.flex().autodiff()
    assert Device.flex() != Device.flex().autodiff()
    assert Device.flex().autodiff() != Device.flex().autodiff(Checkpointing.BALANCED)
    assert len({Device.flex(), Device.flex(), Device.flex().autodiff()}) == 2


def test_autodiff_wrapping():
    flex = Device.flex()
    ad = flex.autodiff()
    assert ad.is_autodiff() and not flex.is_autodiff()
    assert ad.inner() is flex and flex.inner() is flex
    with pytest.raises(DeviceError, match="already an autodiff device"):
        ad.autodiff()
    with pytest.raises(DeviceError):
        flex.autodiff("balanced")


def test_default_device(monkeypatch):
    monkeypatch.delenv("EMBER_DEVICE", raising=False)
    assert Device.default() == Device.flex()
    monkeypatch.setenv("EMBER_DEVICE", "flex+autodiff")
    assert Device.default() == Device.flex().autodiff()
    assert Tensor.zeros([1]).device == Device.flex().autodiff()
    monkeypatch.setenv("EMBER_DEVICE", "tpu")
    with pytest.raises(DeviceError, match="EMBER_DEVICE"):
        Device.default()


def test_priority_list(monkeypatch):
    monkeypatch.delenv("EMBER_DEVICE", raising=False)
    before = Device.default_priority()
    try:
        Device.set_default_priority(["flex"])
        assert Device.default() == Device.flex()
        with pytest.raises(DeviceError):
            Device.set_default_priority(["nope"])
        with pytest.raises(DeviceError):
            Device.set_default_priority([])
    finally:
        Device.set_default_priority(before)


def test_parse_and_spec_roundtrip():
    for device in (Device.flex(), Device.flex().autodiff(), Device.flex().autodiff(Checkpointing.BALANCED)):
        assert Device.parse(device.spec()) == device
        assert pickle.loads(pickle.dumps(device)) == device


def test_seed_is_per_backend_and_shared_with_autodiff():
    flex = Device.flex()
    flex.seed(3)
    a = Tensor.random([4], device=flex).tolist()
    flex.autodiff().seed(3)
    b = Tensor.random([4], device=flex.autodiff()).tolist()
    assert a == b
    with pytest.raises(DeviceError):
        flex.seed(1.5)


def test_rng_state_roundtrip():
    flex = Device.flex()
    flex.seed(11)
    state = flex.rng_state()
    a = Tensor.random([3], device=flex).tolist()
    flex.set_rng_state(state)
    assert Tensor.random([3], device=flex).tolist() == a


def test_sync_waits_for_recorded_work_and_returns_none():
    """sync() runs what a lazy device recorded (a fusion stream) and returns nothing."""
    assert Device.flex().sync() is None
    assert Device.flex().autodiff().sync() is None
    fused = Device.flex().fusion()
    pending = Tensor.from_floats([1.0, 2.0], device=fused).mul_scalar(2.0)
    assert pending._primitive.value is None  # recorded, not run
    assert fused.sync() is None
    assert pending._primitive.value is not None  # the sync point ran it
    np.testing.assert_array_equal(pending.to_numpy(), [2.0, 4.0])


def test_cuda_without_a_gpu_is_a_clear_error():
    from ember.backend.cuda.runtime import device_count

    if device_count():
        pytest.skip("a CUDA device is present")
    with pytest.raises(BackendUnavailableError, match=r"Device.cuda\(0\).*(pip install|driver)"):
        Device.cuda(0)
    with pytest.raises(BackendUnavailableError, match="cuda"):
        Device.parse("cuda:0+autodiff")


def test_cuda_index_is_checked():
    with pytest.raises(DeviceError, match="non-negative int"):
        Device.cuda(-1)


def test_device_kind_repr():
    assert repr(DeviceKind.DEFAULT) == "DeviceKind.DEFAULT"
    assert DeviceKind.DEFAULT.value == "DefaultDevice"
