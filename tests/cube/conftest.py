"""Fixtures of the cube backend's own tests: every test here needs the GPU adapter
(a skip without one, a failure under EMBER_REQUIRE_GPU=1)."""

from __future__ import annotations

import pytest

from tests.conftest import _gpu_device


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/cube/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)


@pytest.fixture
def gpu():
    """The default cube device."""
    return _gpu_device()


@pytest.fixture
def backend(gpu):
    return gpu.backend
