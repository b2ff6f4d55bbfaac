"""Running ranks: ``mpirun(n, check, *args)`` launches ``worker.py`` under the venv's
``mpiexec`` (skipped without MPI; a failure when ``EMBER_REQUIRE_MPI=1``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REQUIRE_MPI

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().parent / "worker.py"


def find_mpiexec() -> str | None:
    """The ``mpiexec`` next to this Python (the mpich wheel puts it there), else on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    return shutil.which("mpiexec")


def _require_mpi() -> str:
    try:
        import mpi4py  # noqa: F401
    except ImportError as error:
        reason = f"mpi4py is not installed ({error}); pip install -e '.[dist]'"
    else:
        mpiexec = find_mpiexec()
        if mpiexec is not None:
            return mpiexec
        reason = "no mpiexec found (the mpich wheel provides one: pip install -e '.[dist]')"
    if REQUIRE_MPI:
        pytest.fail(f"MPI is required (EMBER_REQUIRE_MPI=1): {reason}")
    pytest.skip(reason)


def worker_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update({"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    env.pop("EMBER_DIST_BACKEND", None)
    env.update(extra)
    return env


@pytest.fixture
def mpirun():
    mpiexec = _require_mpi()

    def run(
        n: int,
        *args: str,
        timeout: float = 120,
        launcher_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess:
        command = [mpiexec, *launcher_args, "-n", str(n), sys.executable, str(WORKER), *args]
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=worker_env(**(env or {}))
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(command)} exited with {result.returncode}:\n"
                f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
            )
        return result

    return run
