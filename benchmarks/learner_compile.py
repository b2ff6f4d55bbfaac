"""``Learner(compile=True)`` against eager on scikit-learn's digits
(``examples/classify_digits.py``): epoch times with the compile counted, with a cold
and a warm compiled-code cache.

    python benchmarks/learner_compile.py                 # 5 epochs, 3 rounds
    python benchmarks/learner_compile.py --epochs 25 --rounds 2
    python benchmarks/learner_compile.py --clock cpu     # epochs in CPU time (a loaded machine)

Each round runs the example three times, each in a fresh process, in alternating
order: eager; compiled with a *cold* cache (an ``EMBER_CACHE_DIR`` holding only what an
eager run of the example compiled: flex's native kernels, and the shared kernels eager
and compiled code both call, see ``ember/backend/kernel/llvm/shared.py``); compiled with a *warm* cache
(the cold run's directory: its plans load from disk, see
``ember/backend/kernel/llvm/object_cache.py``). Figures are medians over rounds: the
wall time of epoch 1, epoch 2 and of the later epochs (median), the sum over all
epochs (the compile included: the stricter reading of the target) and each process's whole
CPU time (``getrusage`` of the child: it includes importing and loading the data). Ratios are medians of
per-round ratios against the eager run of the same round.

ember's modules are byte-compiled first (``compileall``, as installing the package
does): where ``PYTHONDONTWRITEBYTECODE`` is set, every child would otherwise compile
the source of each module it imports, and the compiled runs import more of ember
(``ember.backend.fusion.llvm``: about 0.08 s of CPU per process on this machine).

Target (issue 27): a digits epoch with ``compile=True`` at most 0.6x of the eager epoch
(the later epochs' column; the all-epochs column also counts the compile).

The example builds its batches on one background thread (``--workers 1``, its
default). A compiled step is one native call that releases the GIL, so that thread
builds the next batch while the step runs. An eager step's native calls are short,
so the thread's Python (about 10 ms of CPU per epoch: the random crops and the
batcher) runs in turns with the step's own under the one GIL: eager gains nothing
from the thread. Wall time (the default, what the Learner's log
reports) therefore shows compiled steps' overlap with data loading; ``--clock cpu``
adds the loader thread's CPU to every epoch, and ``--workers 0`` builds the batches on
the training thread in both modes (no overlap anywhere).

Measured on this project's machine (2 cores, AVX-512, load about 1), 25 epochs, 5
rounds each, medians of per-round ratios (their range):

- wall time, one loader worker (the defaults): later epochs 0.39x (0.28-0.42), all 25
  epochs with a cold cache 0.50x (0.40-0.56), with a warm one 0.41x;
- wall time, ``--workers 0``: later epochs 0.57x (0.47-0.58), cold 0.72x, warm 0.57x
  (eager's later epoch 0.098 s against 0.104 s with the worker);
- ``--clock cpu``, one worker: later epochs 0.60x (0.48-0.70), cold 0.75x, warm 0.61x.

The cold runs' first epoch (0.41-0.51 s against eager's 0.18-0.21 s) holds the
compile: about 0.3 s, paid once per model and cache.
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import blas_line, print_table  # noqa: E402

MODES = ("eager", "compiled, cold cache", "compiled, warm cache")
#: Alternating orders (a warm run follows its round's cold run).
ORDERS = ((0, 1, 2), (1, 2, 0), (1, 0, 2))
EPOCH = re.compile(r"epoch (\d+)/\d+ done in ([0-9.]+)s")


#: The child: the example, its log's epoch times to 0.1 ms (the plain renderer rounds
#: them to 10 ms, a sixth of a compiled digits epoch); with ``cpu``, the training loop's
#: epoch clock is the process's CPU time (``ember/train/loop.py`` times epochs with
#: ``time.perf_counter`` alone).
CHILD = (
    "import runpy, sys, time, types; import ember.train.loop as loop; line = loop.epoch_line; "
    "loop.epoch_line = lambda r: line(r).replace(f'done in {r.duration:.2f}s', f'done in {r.duration:.4f}s'); "
    "loop.time = types.SimpleNamespace(perf_counter=time.process_time) if sys.argv[1] == 'cpu' else time; "
    "sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def run_example(
    epochs: int, compile: bool, cache: Path, artifacts: Path, clock: str = "wall", workers: int = 1
) -> tuple[list[float], float]:
    """Per-epoch seconds (from the run's log; wall or CPU time, see ``clock``) and the
    process's CPU seconds."""
    env = {**os.environ, "EMBER_CACHE_DIR": str(cache), "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", CHILD, clock]
    command += [str(ROOT / "examples" / "classify_digits.py"), "--epochs", str(epochs)]
    command += ["--fresh", "--artifact-dir", str(artifacts), "--renderer", "none"]
    command += ["--compile", "on" if compile else "off", "--workers", str(workers)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    log = (artifacts / "experiment.log").read_text()
    times = [float(seconds) for _, seconds in EPOCH.findall(log)]
    if len(times) != epochs:
        raise RuntimeError(f"expected {epochs} epoch lines in {artifacts}/experiment.log, found {len(times)}")
    return times, cpu


def _ratios(values: list[float]) -> str:
    """The median of per-round ratios, and their range over the rounds: the machine's
    speed drifts between processes (eager's later epochs measured 0.087-0.124 s in runs
    minutes apart), so one median says less than the spread."""
    median = f"{statistics.median(values):.2f}x"
    return median if len(values) < 2 else f"{median} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--clock", choices=["wall", "cpu"], default="wall", help="time epochs in wall or in this process's CPU time"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="the example's background threads that build batches (its default 1; 0 builds them on the "
        "training thread, between steps)",
    )
    args = parser.parse_args()
    if args.epochs < 3:
        parser.error("--epochs must be at least 3 (epochs 1 and 2 pay for the traces)")
    modes = MODES
    results: dict[str, list[tuple[list[float], float]]] = {mode: [] for mode in modes}
    compileall.compile_dir(str(ROOT / "ember"), quiet=1)  # as an installed package has them
    with tempfile.TemporaryDirectory(prefix="ember-learner-bench-") as scratch:
        root = Path(scratch)
        base = root / "base"
        base.mkdir()
        run_example(args.epochs, False, base, root / "runs")  # flex's native kernels into the base cache
        for r in range(args.rounds):
            cold = root / f"cold{r}"
            shutil.copytree(base, cold)
            order = ORDERS[r % len(ORDERS)]
            for mode in (modes[k] for k in order):
                cache = base if mode == "eager" else cold
                results[mode].append(
                    run_example(args.epochs, mode != "eager", cache, root / "runs", args.clock, args.workers)
                )
    load = os.getloadavg()[0]
    header = ["mode", "epoch 1 s", "epoch 2 s", "later epochs s", "all epochs s", "x eager (all)", "x eager (later)"]
    header.append("process CPU s")
    rows = []
    for mode in modes:
        runs = results[mode]
        later = [statistics.median(times[2:]) for times, _ in runs]
        total = [sum(times) for times, _ in runs]
        eager_later = [statistics.median(times[2:]) for times, _ in results["eager"]]
        eager_total = [sum(times) for times, _ in results["eager"]]
        rows.append(
            [
                mode,
                f"{statistics.median(t[0] for t, _ in runs):.2f}",
                f"{statistics.median(t[1] for t, _ in runs):.2f}",
                f"{statistics.median(later):.3f}",
                f"{statistics.median(total):.2f}",
                _ratios([a / b for a, b in zip(total, eager_total)]),
                _ratios([a / b for a, b in zip(later, eager_later)]),
                f"{statistics.median(cpu for _, cpu in runs):.2f}",
            ]
        )
    title = f"digits, {args.epochs} epochs, {args.workers} loader worker(s), Learner eager against compile=True"
    print_table(f"{title} ({args.clock} time)", header, rows)
    print(
        f"\n{args.epochs} epochs, {args.rounds} rounds (medians; ratios: median of per-round ratios and their range), "
        f"load average {load:.1f} at the end"
    )
    print(blas_line())


if __name__ == "__main__":
    main()
