"""ember.distributed under real MPI: ranks launched with ``mpiexec -n 2`` and ``-n 3``.

Each launch runs :mod:`tests.distributed.worker`, which asserts on every rank:
collectives against numpy (every device and dtype), the sampler's shards, DDP
against single-process training on the whole batch, bit-identical ranks, the
Learner with rank-0 checkpoints and a resume under another world size, and the
fault paths (a rank that raises, a rank that is killed).
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import REQUIRE_GPU
from tests.distributed.conftest import ROOT, WORKER, worker_env

pytestmark = pytest.mark.mpi


def _cube_env() -> dict[str, str]:
    """Collectives on cube too when an adapter is there (required where CI requires it)."""
    if REQUIRE_GPU:
        return {"EMBER_TEST_CUBE": "1"}
    try:
        from ember import Device

        Device.wgpu().backend.ensure_ready()
    except Exception:
        return {}
    return {"EMBER_TEST_CUBE": "1"}


@pytest.mark.parametrize("n", [2, 3])
def test_collectives_sampler_and_ddp_equivalence(mpirun, n):
    out = mpirun(n, "basic", env=_cube_env() if n == 2 else None)
    for check in ("collectives", "sampler", "ddp", "compiled"):
        for r in range(n):
            assert f"ok {check} rank {r}" in out.stdout, out.stdout


@pytest.mark.parametrize("n", [2, 3])
def test_ring_all_reduce_against_numpy(mpirun, n):
    """The ring (see ember.distributed.ring) from 64 bytes per rank on, so that small
    odd-sized buffers take it too."""
    out = mpirun(n, "ring", env={"EMBER_DIST_RING": "64"})
    for r in range(n):
        assert f"ok ring rank {r}" in out.stdout, out.stdout


def test_learner_rank0_checkpoints_and_resume_on_another_world_size(mpirun, tmp_path):
    """Two epochs on 2 ranks, a third resumed on 3 ranks (global batch 12 throughout)
    equal three epochs in one process."""
    reference = tmp_path / "reference.json"
    subprocess.run(
        [sys.executable, str(WORKER), "learner", str(tmp_path / "single"), "3", "12", str(reference)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=worker_env(),
    )
    run_dir = tmp_path / "parallel"
    first = mpirun(2, "learner", str(run_dir), "2", "12")
    assert "ok learner rank 1" in first.stdout
    # Rank 0 alone wrote: one log row per step, not one per rank per step.
    with (run_dir / "logs" / "train.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 2 * 6, len(rows)  # 72 items, 6 per rank per step, 2 epochs
    assert sorted(p.name for p in (run_dir / "checkpoint").iterdir()) == ["epoch-0001", "epoch-0002"]
    assert (run_dir / "summary.json").exists()
    assert first.stdout.count("epoch 2/2 done") == 1  # only rank 0 renders

    resumed = tmp_path / "resumed.json"
    second = mpirun(3, "learner", str(run_dir), "3", "12", str(resumed))
    assert "Resumed from checkpoint epoch-0002" in second.stdout
    ref, got = json.loads(reference.read_text()), json.loads(resumed.read_text())
    assert got["epochs"] == 3
    for path, value in ref["params"].items():
        np.testing.assert_allclose(got["params"][path], value, rtol=1e-4, atol=1e-5, err_msg=path)
    # The metrics were merged over ranks: the same epoch values as one process.
    for split in ("train", "valid"):
        for name, series in ref["history"][split].items():
            assert sorted(got["history"][split][name]) == sorted(series) == ["1", "2", "3"]
            np.testing.assert_allclose(
                [got["history"][split][name][e] for e in series],
                list(series.values()),
                rtol=1e-4,
                atol=1e-4,
                err_msg=f"{split} {name}",
            )
    assert sorted(p.name for p in (run_dir / "checkpoint").iterdir()) == ["epoch-0002", "epoch-0003"]


# "ring": every gradient bucket all-reduced as a ring (EMBER_DIST_RING=64 bytes per rank).
RING = pytest.mark.parametrize("env", [{}, {"EMBER_DIST_RING": "64"}], ids=["mpi", "ring"])


@RING
def test_a_rank_that_raises_stops_every_rank_naming_it(mpirun, env):
    started = time.monotonic()
    result = mpirun(2, "raise", check=False, timeout=60, env=env)
    assert result.returncode != 0
    assert time.monotonic() - started < 30
    assert "rank 1 failed: ValueError: a deliberate failure on rank 1" in result.stderr, result.stderr


@pytest.mark.slow
@RING
def test_a_frozen_rank_is_named_by_the_others_within_the_timeout(mpirun, env):
    """A rank that stops answering (here: SIGSTOP) is found by the others' watchdogs."""
    started = time.monotonic()
    result = mpirun(3, "freeze", check=False, timeout=60, env={"EMBER_DIST_TIMEOUT": "3", **env})
    elapsed = time.monotonic() - started
    assert result.returncode != 0
    assert elapsed < 30, elapsed
    assert "rank 1: not responding" in result.stderr, result.stderr
    assert "longer than the timeout of 3 s" in result.stderr


@RING
def test_a_killed_rank_ends_the_run(mpirun, env):
    """MPICH's mpiexec ends the others at once and reports the killed process; where a
    launcher does not, the watchdogs end them after the timeout (as for a frozen rank)."""
    started = time.monotonic()
    result = mpirun(3, "kill", check=False, timeout=60, env={"EMBER_DIST_TIMEOUT": "3", **env})
    assert result.returncode != 0
    assert time.monotonic() - started < 30
    assert "Killed" in result.stdout + result.stderr


@pytest.mark.slow
def test_the_distributed_example_trains_on_two_ranks(mpirun, tmp_path):
    pytest.importorskip("sklearn")
    from tests.distributed.conftest import find_mpiexec

    command = [
        find_mpiexec(),
        "-n",
        "2",
        sys.executable,
        str(ROOT / "examples" / "distributed.py"),
        "--epochs",
        "2",
        "--artifact-dir",
        str(tmp_path / "run"),
        "--renderer",
        "plain",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT, env=worker_env())
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("validation accuracy"))
    assert "on 2 rank(s)" in line and float(line.split()[2].rstrip("%")) > 60.0, line
    assert result.stdout.count("validation accuracy") == 1  # rank 0 alone reports
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoint").iterdir()) == ["epoch-0001", "epoch-0002"]
