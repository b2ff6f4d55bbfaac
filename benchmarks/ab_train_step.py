"""Before/after: ember's W1/W2 training steps (benchmarks/train_step.py) from two
source trees, run in alternating rounds (drifting machine load hits both alike).

    OPENBLAS_NUM_THREADS=1 python benchmarks/ab_train_step.py --base main --rounds 8

``--base`` is a git revision (exported to a temporary directory) or a directory;
the "after" tree is this checkout. Each round runs one fresh process per tree and
takes the median us per step over its repeats; the table gives the medians over
rounds and the median of the per-round after/before ratios. ``--clock cpu`` times
with the process's CPU time (less sensitive to other processes on a shared machine).
``--clock instructions`` counts the instructions of a step instead (valgrind's
callgrind, run twice per tree and workload with two step counts, instrumenting
only after the warm-up (so a run takes about a minute); the difference over the
extra steps): deterministic, so one round serves, and unaffected by the
machine's load; a proxy for time that misses memory stalls and BLAS threading.
``--workloads`` picks among ``w1``-``w4`` (eager), ``w1c``-``w4c`` (the same steps through
``ember.compile``; W1-W3 as benchmarks/compile.py builds them, W4 benchmarks/gpt.py's GPT)
``w1f`` (W1 on ``Device.flex().fusion()``, whose per-op cost is recording the lazy
stream) and ``lstm``, ``lstmc``, ``gru``, ``gruc`` (benchmarks/rnn.py's classifiers, eager
and compiled). Under ``--clock instructions`` W3 and W4 take tens of minutes (valgrind runs
their convolutions, GEMMs and, compiled, the LLVM compile about 50x slower): time them
with ``--clock cpu`` instead.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs inside the tree under test: only names both old and new trees have.
WORKER = r"""
import os, sys, statistics, time
root, clock, names = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
sys.path.insert(0, root)
os.chdir(root)
import numpy as np
import ember
assert os.path.realpath(ember.__file__).startswith(os.path.realpath(root)), ember.__file__
from benchmarks.train_step import ember_step_fn, mlp
from ember import Device, Tensor
from ember.nn.loss import CrossEntropyLoss, MseLoss, Reduction
now = time.process_time if clock == "cpu" else time.perf_counter
extra = int(clock[6:]) if clock.startswith("count:") else None  # steps to run untimed (instructions)

def timed(step, steps, repeats, warmup):
    for _ in range(warmup):
        step()
    if extra is not None:  # under callgrind: count from here (imports and warm-up left out)
        import subprocess
        subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], capture_output=True, check=False)
        for _ in range(extra):
            step()
        return 0.0
    samples = []
    for _ in range(repeats):
        start = now()
        for _ in range(steps):
            step()
        samples.append((now() - start) / steps * 1e6)
    return statistics.median(samples)

rng = np.random.default_rng(0)
device = Device.flex().autodiff()
out = {}
for name in names:
    if name not in ("w1", "w1f"):
        continue
    on = device if name == "w1" else Device.flex().fusion().autodiff()  # w1f: W1 on the fusion device
    x_np = rng.uniform(-1, 1, (64, 4)).astype(np.float32)
    y_np = (x_np @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32) + 0.5).astype(np.float32)
    x, y = Tensor.from_data(x_np, device=on), Tensor.from_data(y_np, device=on)
    mse = MseLoss()
    step = ember_step_fn(mlp([4, 16, 1], on), x, y, lambda p, t: mse.forward(p, t, Reduction.MEAN))
    out[name] = timed(step, 200, 5, 20)
if "w2" in names:
    x = Tensor.from_data(rng.standard_normal((128, 784)).astype(np.float32), device=device)
    y = Tensor.from_data(rng.integers(0, 10, 128), device=device)
    ce = CrossEntropyLoss()
    step = ember_step_fn(mlp([784, 256, 10], device), x, y, lambda p, t: ce.forward(p, t))
    out["w2"] = timed(step, 30, 5, 5)
for name in names:  # W3, and W1-W3 compiled: benchmarks/compile.py's steps
    if name in ("w3", "w1c", "w2c", "w3c"):
        from benchmarks.compile import ember_step
        kind = "compiled" if name.endswith("c") else "eager"
        step = ember_step(name[:2].upper(), kind)
        out[name] = timed(step, {"w1": 200, "w2": 30, "w3": 5}[name[:2]], 5, {"w1": 20, "w2": 5, "w3": 3}[name[:2]])
for name in names:  # W4 (benchmarks/train_step.py's GPT), eager and compiled
    if name in ("w4", "w4c"):
        import ember
        from benchmarks.gpt import ember_gpt
        from ember.optim import AdamConfig, GradientsParams
        device.seed(0)
        model = ember_gpt(device, vocab=65, block=64)
        x = Tensor.from_data(rng.integers(0, 65, (16, 64)), device=device)
        y = Tensor.from_data(rng.integers(0, 65, (16, 64)), device=device)
        ce = CrossEntropyLoss()
        optim = AdamConfig().init()

        def train_step(model, x, y):
            loss = ce.forward(model(x).reshape([-1, 65]), y.reshape([-1]))
            return optim.step(1e-3, model, GradientsParams.from_grads(loss.backward(), model)), loss

        fn = ember.compile(train_step) if name == "w4c" else train_step
        state = {"model": model}

        def step():
            state["model"], loss = fn(state["model"], x, y)
            loss.into_scalar()

        out[name] = timed(step, 3, 5, 2)
for name in names:  # benchmarks/rnn.py's recurrent classifiers, eager and compiled
    if name in ("lstm", "lstmc", "gru", "gruc"):
        from benchmarks.rnn import compiled_step_fn, data, ember_twin
        from benchmarks.rnn import ember_step_fn as rnn_step_fn
        x_np, y_np = data()
        model = ember_twin(name[:-1] if name.endswith("c") else name, device, None)
        xs, ys = Tensor.from_data(x_np, device=device), Tensor.from_data(y_np, device=device)
        step = (compiled_step_fn if name.endswith("c") else rnn_step_fn)(model, xs, ys)
        out[name] = timed(step, 5, 5, 3)
print(" ".join(f"{out[name]:.2f}" for name in names))
"""


# (fewer, more) steps per workload for --clock instructions
COUNTS = {
    "w1": (50, 250),
    "w1f": (50, 250),
    "w2": (4, 24),
    "w3": (2, 6),
    "w4": (1, 3),
    "w1c": (50, 250),
    "w2c": (4, 24),
    "w3c": (2, 6),
    "w4c": (1, 3),
    "lstm": (1, 3),
    "lstmc": (1, 3),
    "gru": (1, 3),
    "gruc": (1, 3),
}


def instructions(root: str, names: list[str]) -> list[float]:
    """Thousands of instructions per step of each workload (callgrind)."""
    # The hash seed fixed: set and dict orders (and so the instructions) repeat run to run.
    env = dict(os.environ, OPENBLAS_NUM_THREADS=os.environ.get("OPENBLAS_NUM_THREADS", "1"), PYTHONHASHSEED="0")
    out = []
    for name in names:
        totals = []
        for count in COUNTS[name]:
            result = subprocess.run(
                ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=/dev/null"]
                + [sys.executable, "-c", WORKER, root, f"count:{count}", name],
                capture_output=True,
                text=True,
                env=env,
                check=False,
            )
            found = re.search(r"refs:\s*([\d,]+)", result.stderr)
            if result.returncode != 0 or found is None:
                raise SystemExit(f"the callgrind run in {root} failed:\n{result.stderr[-2000:]}")
            totals.append(int(found.group(1).replace(",", "")))
        low, high = COUNTS[name]
        out.append((totals[1] - totals[0]) / (high - low) / 1000)
    return out


def run(root: str, clock: str, names: list[str]) -> list[float]:
    if clock == "instructions":
        return instructions(root, names)
    env = dict(os.environ, OPENBLAS_NUM_THREADS=os.environ.get("OPENBLAS_NUM_THREADS", "1"))
    result = subprocess.run(
        [sys.executable, "-c", WORKER, root, clock, ",".join(names)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"the run in {root} failed:\n{result.stderr}")
    return [float(v) for v in result.stdout.split()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="main", help="git revision or directory of the 'before' tree")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--clock", choices=["wall", "cpu", "instructions"], default="wall")
    parser.add_argument("--workloads", default="w1,w2")
    args = parser.parse_args()
    names = args.workloads.split(",")
    if args.clock == "instructions":
        args.rounds = 1  # deterministic counts
    with tempfile.TemporaryDirectory() as tmp:
        base = args.base
        if not os.path.isdir(base):
            archive = subprocess.run(["git", "-C", ROOT, "archive", base], capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            base = tmp
        before: list[list[float]] = []
        after: list[list[float]] = []
        for i in range(args.rounds):
            first, second = (base, ROOT) if i % 2 == 0 else (ROOT, base)  # alternate which goes first
            results = {first: run(first, args.clock, names), second: run(second, args.clock, names)}
            before.append(results[base])
            after.append(results[ROOT])
            print(
                f"round {i + 1}: before "
                + " ".join(f"{v:9.1f}" for v in results[base])
                + "   after "
                + " ".join(f"{v:9.1f}" for v in results[ROOT]),
                flush=True,
            )
    unit = "thousand instructions" if args.clock == "instructions" else "us"
    print(f"\n{args.clock} clock, {unit} per step, medians over {args.rounds} alternating rounds (before: {args.base})")
    for j, name in enumerate(names):
        b = statistics.median(r[j] for r in before)
        a = statistics.median(r[j] for r in after)
        ratio = statistics.median(x[j] / y[j] for x, y in zip(after, before))
        print(f"{name}: before {b:9.1f}   after {a:9.1f}   after/before (median of rounds) {ratio:.3f}")


if __name__ == "__main__":
    main()
