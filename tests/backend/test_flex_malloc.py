"""flex's C-heap setting (``ember/backend/flex/malloc.py``): applied once when a flex
backend is created (on glibc), skipped with ``EMBER_MALLOC_TUNE=0``; the page faults
of a repeated large allocation go away."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import resource, numpy as np
from ember import Device
from ember.backend.flex import malloc
Device.flex().backend
applied = malloc.tune()
def churn():
    for _ in range(50):
        a = np.ones(1 << 19, np.float32)   # 2 MiB: above glibc's default mmap threshold
        b = a * 2.0
        del a, b
churn()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
churn()
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def probe(**env: str) -> tuple[bool, int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
    ).stdout.split()
    return out[0] == "True", int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_blocks_are_reused_and_the_setting_can_be_turned_off():
    applied, faults = probe()
    if not applied:
        pytest.skip("this C library has no mallopt (not glibc)")
    assert faults < 200  # 100 arrays of 2 MiB: thousands of faults without the setting
    applied_off, _ = probe(EMBER_MALLOC_TUNE="0")
    assert not applied_off
