"""Resuming a checkpoint whose generator state is from ember's former PCG64 generator:
the run goes on, warned, from a seed derived from that state (the same every time)."""

from __future__ import annotations

import logging
import shutil

import numpy as np

from ember import Device
from tests.train.models import params
from tests.train.test_checkpoint import fit


def test_resume_from_a_checkpoint_with_a_legacy_pcg64_state(tmp_path, monkeypatch, caplog):
    legacy = np.random.Generator(np.random.PCG64(5)).bit_generator.state
    with monkeypatch.context() as patch:
        patch.setattr(Device, "rng_state", lambda self: legacy)  # what older ember saved
        first = fit(tmp_path / "a", stop_after=13)
    assert first.interrupted
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    with caplog.at_level(logging.WARNING):
        resumed = fit(tmp_path / "a")
    assert "PCG64" in caplog.text and "differ from the uninterrupted run" in caplog.text
    assert resumed.epochs == 3 and not resumed.interrupted
    again = fit(tmp_path / "b", seed=123)  # another seed: the derived one wins
    got, want = params(again.model), params(resumed.model)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
