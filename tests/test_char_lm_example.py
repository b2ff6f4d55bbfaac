"""examples/char_lm.py in short: it trains (the loss falls), saves a TrainingState,
resumes from it to the same weights as an uninterrupted run, and samples text."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ember.module.safetensors_file import read_safetensors

ROOT = Path(__file__).resolve().parent.parent

try:  # the example uses the optimizer API of the `optim` work (warm-up, global-norm clipping)
    from ember.optim import GradientClipping
    from ember.optim.lr_scheduler import WarmupLrSchedulerConfig  # noqa: F401

    MISSING = None if hasattr(GradientClipping, "global_norm") else "GradientClipping.global_norm"
except ImportError:
    MISSING = "WarmupLrSchedulerConfig"


def run(*args: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "char_lm.py"), *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def weights(folder: Path) -> dict[str, np.ndarray]:
    tensors, _ = read_safetensors(folder / "state" / "model.safetensors")
    return tensors


@pytest.mark.skipif(MISSING is not None, reason=f"the example needs {MISSING} (ember.optim)")
def test_trains_resumes_and_samples(tmp_path):
    short = ["--eval-every", "6", "--save-every", "6", "--sample-chars", "40", "--warmup", "4", "--steps"]
    straight = run(*short, "12", "--out", str(tmp_path / "straight"))
    assert "standard-library docstrings" in straight and "resumed" not in straight
    losses = [float(v) for v in re.findall(r"step +\d+  loss (\d+\.\d+)", straight)]
    assert len(losses) == 2 and losses[1] < losses[0] and losses[0] < 4.7  # ln(vocabulary) is ~4.6 at the start
    sample = straight.split("--- sample (temperature 0.8) ---\n")[1]
    assert sample.startswith("The ") and len(sample.rstrip("\n")) >= 40

    first = run(*short, "12", "--stop-at", "6", "--out", str(tmp_path / "resumed"), "--sample-chars", "0")
    assert "trained 6 steps" in first and "stopped at step 6 of 12" in first
    second = run(*short, "12", "--out", str(tmp_path / "resumed"))
    assert "resumed from" in second and "at step 6" in second and "trained 6 steps" in second
    a, b = weights(tmp_path / "straight"), weights(tmp_path / "resumed")
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)  # dropout, batches and AdamW state all resumed


@pytest.mark.skipif(MISSING is not None, reason=f"the example needs {MISSING} (ember.optim)")
def test_trains_on_a_named_file(tmp_path):
    text = tmp_path / "tiny.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 60)
    out = run(str(text), "--steps", "4", "--eval-every", "4", "--sample-chars", "20", "--out", str(tmp_path / "run"))
    assert "tiny.txt" in out and "vocabulary 28" in out
