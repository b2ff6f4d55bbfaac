"""Shared fixtures: the devices the conformance tests run on, and oracles.

``EMBER_REQUIRE_TORCH=1`` turns a missing PyTorch into a failure instead of a skip,
``EMBER_REQUIRE_GPU=1`` does the same for the cube backend's adapter, and
``EMBER_REQUIRE_MPI=1`` for MPI (mpi4py and ``mpiexec``) in the distributed tests
(CI sets all three). The ``cuda`` devices always skip without an NVIDIA GPU (CI has
none; ``scripts/gpu_check.sh`` runs them where one is present).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from ember import Device

REQUIRE_TORCH = os.environ.get("EMBER_REQUIRE_TORCH") == "1"
REQUIRE_GPU = os.environ.get("EMBER_REQUIRE_GPU") == "1"
REQUIRE_MPI = os.environ.get("EMBER_REQUIRE_MPI") == "1"


def import_torch():
    """PyTorch, or a skip (a failure when EMBER_REQUIRE_TORCH=1)."""
    try:
        import torch
    except ImportError:
        if REQUIRE_TORCH:
            pytest.fail("PyTorch is required (EMBER_REQUIRE_TORCH=1) but not installed")
        pytest.skip("PyTorch is not installed")
    torch.set_num_threads(1)
    return torch


@pytest.fixture
def torch():
    return import_torch()


def _gpu_device():
    try:
        device = Device.wgpu()
        device.backend.ensure_ready()
        return device
    except Exception as error:
        if REQUIRE_GPU:
            pytest.fail(f"a GPU adapter is required (EMBER_REQUIRE_GPU=1): {error}")
        pytest.skip(f"no GPU adapter: {error}")


def _cuda_device():
    """``Device.cuda()``, or a skip where there is no NVIDIA GPU (never required in CI)."""
    try:
        return Device.cuda()
    except Exception as error:
        pytest.skip(f"no CUDA device: {error}")


DEVICE_NAMES = [
    "flex",
    "flex+autodiff",
    "flex+fusion",
    "flex+fusion+autodiff",
    "cube",
    "cube+autodiff",
    "cube+fusion",
    "cuda",
    "cuda+autodiff",
]


def make_device(name: str) -> Device:
    if name == "flex":
        return Device.flex()
    if name == "flex+autodiff":
        return Device.flex().autodiff()
    if name == "flex+fusion":
        return Device.flex().fusion()
    if name == "flex+fusion+autodiff":
        return Device.flex().fusion().autodiff()
    if name == "cube":
        return _gpu_device()
    if name == "cube+autodiff":
        return _gpu_device().autodiff()
    if name == "cube+fusion":
        return _gpu_device().fusion()
    if name == "cuda":
        return _cuda_device()
    if name == "cuda+autodiff":
        return _cuda_device().autodiff()
    raise ValueError(name)


def float64_supported(device: Device) -> bool:
    """True where the device holds float64. On cube (WGSL has no 64-bit floats) this
    instead checks the documented behaviour, a DTypeError naming the fix, and returns
    False so that the caller ends the test there (a pass, not a skip)."""
    if device.backend_name != "cube":
        return True
    from ember import Tensor
    from ember.errors import DTypeError

    with pytest.raises(DTypeError, match="float64"):
        Tensor.zeros([1], device=device, dtype="float64")
    return False


def parity_device() -> Device:
    """The autodiff device of the PyTorch-parity and optimizer trajectory tests:
    ``EMBER_PARITY_DEVICE`` (a ``Device.parse`` spec such as ``cuda+autodiff``, which
    ``scripts/gpu_check_cuda.sh`` sets), else ``flex+autodiff``."""
    return Device.parse(os.environ.get("EMBER_PARITY_DEVICE", "flex+autodiff"))


@pytest.fixture(params=DEVICE_NAMES)
def device(request):
    """Every device the backend conformance suite runs on."""
    return make_device(request.param)


@pytest.fixture
def flex():
    return Device.flex()


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def assert_close(actual, expected, rtol=1e-5, atol=1e-6, dtype_tol=None):
    """Compare an ember tensor (or array) with an expected array in float64."""
    a = np.asarray(actual.to_numpy() if hasattr(actual, "to_numpy") else actual)
    e = np.asarray(expected)
    assert a.shape == e.shape, f"shape {a.shape} != expected {e.shape}"
    if a.dtype.kind == "b" or e.dtype.kind == "b":
        np.testing.assert_array_equal(a, e)
        return
    np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
