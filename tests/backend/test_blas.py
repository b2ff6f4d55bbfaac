"""numpy's OpenBLAS as ember finds and configures it (ember/backend/flex/blas.py)."""

from __future__ import annotations

import pytest


def test_the_blas_thread_count_is_ours_and_never_exceeds_the_cores(monkeypatch):
    from ember.backend.flex import blas
    from ember.errors import ConfigError

    monkeypatch.delenv(blas.THREADS_ENV, raising=False)
    assert blas.thread_count() == 1
    monkeypatch.setenv(blas.THREADS_ENV, "4096")
    assert blas.thread_count() == blas.available_cores()
    for bad in ("0", "-2", "many"):
        monkeypatch.setenv(blas.THREADS_ENV, bad)
        with pytest.raises(ConfigError, match="EMBER_NUM_THREADS"):
            blas.thread_count()
