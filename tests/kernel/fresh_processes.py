"""Running a script in two fresh processes that share one object cache: the first
compiles, the second should load everything from disk. Each run's script saves an
array with ``np.save(sys.argv[1], ...)``; the prelude counts the modules it compiled
(``compile_module`` calls that optimised IR) and the script prints that count with
:data:`REPORT`."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

#: The script's first lines: ``compiles`` collects, per module, whether it compiled.
PRELUDE = textwrap.dedent(
    """
    import sys
    import numpy as np
    from ember.backend.kernel.llvm import jit

    compiles = []
    real = jit.compile_module
    def counting(*args, **kwargs):
        found = real(*args, **kwargs)
        compiles.append(found.optimize_s > 0.0)
        return found
    jit.compile_module = counting
    """
)
#: The script's last line.
REPORT = 'print("compiled", sum(compiles), "of", len(compiles))\n'


def run_twice(tmp_path: Path, body: str, env: dict[str, str]) -> tuple[list[int], np.ndarray, np.ndarray]:
    """Runs :data:`PRELUDE` + ``body`` + :data:`REPORT` twice with one cache under
    ``tmp_path`` (and ``env`` on top of the environment); per run the modules it
    compiled, and the two saved arrays."""
    full = {**os.environ, "EMBER_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT), **env}
    full.pop("EMBER_COMPILE_CACHE", None)
    script = tmp_path / "run.py"
    script.write_text(PRELUDE + textwrap.dedent(body) + REPORT)
    compiled = []
    for k in range(2):
        done = subprocess.run(
            [sys.executable, str(script), str(tmp_path / f"out{k}.npy")], env=full, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        compiled.append(int(done.stdout.split()[1]))
    first, second = (np.load(tmp_path / f"out{k}.npy") for k in range(2))
    return compiled, first, second
