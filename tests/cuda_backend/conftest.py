"""Fixtures of the cuda backend's tests.

``EMBER_REQUIRE_NVRTC=1`` (set in CI) turns a missing NVRTC into a failure instead of
a skip: the compile tests need no GPU, only ``cuda-bindings`` and the NVRTC wheel
(the ``cuda12`` extra's compiler part).
"""

from __future__ import annotations

import os

import pytest

REQUIRE_NVRTC = os.environ.get("EMBER_REQUIRE_NVRTC") == "1"


def require_nvrtc() -> None:
    """Skip (or fail, with ``EMBER_REQUIRE_NVRTC=1``) unless NVRTC loads."""
    try:
        from ember.backend.cuda import nvrtc

        nvrtc.version()
    except Exception as error:
        if REQUIRE_NVRTC:
            pytest.fail(f"NVRTC is required (EMBER_REQUIRE_NVRTC=1) but cannot load: {error}")
        pytest.skip(f"NVRTC is not available: {error}")


@pytest.fixture
def nvrtc_available() -> None:
    require_nvrtc()
