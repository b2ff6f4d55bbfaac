"""The seed program (examples/one_step.py) runs, learns, and repeats exactly."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run_one_step(steps: int) -> str:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "one_step.py"), str(steps)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=True,
    )
    return result.stdout


def test_one_step_prints_the_seed_format_and_learns():
    out = _run_one_step(100)
    assert "flex: device = Device<Autodiff { device: Flex(Cpu), checkpointing: Disabled }>, params = 97" in out
    lines = re.findall(r"step +(\d+)  loss (\d+\.\d{6})  grads (\d+)  \S+", out)
    steps = [int(s) for s, _, _ in lines]
    assert steps[:5] == [0, 1, 2, 3, 4] and 49 in steps and 99 in steps
    assert all(g == "4" for _, _, g in lines)
    losses = [float(loss) for _, loss, _ in lines]
    assert losses[-1] < 0.05 * losses[0]
    assert re.search(r"100 steps in \S+", out)
    # The compiled step learns the same losses.
    compiled = re.findall(r"step +\d+  loss (\d+\.\d{6})  compiled", out)
    assert compiled and compiled == [loss for _, loss, _ in lines][: len(compiled)]


def test_two_runs_print_identical_losses():
    def losses(out: str) -> list[str]:
        return re.findall(r"loss (\d+\.\d+)", out)

    assert losses(_run_one_step(60)) == losses(_run_one_step(60))
