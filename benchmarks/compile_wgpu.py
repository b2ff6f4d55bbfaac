"""Compiled steps on wgpu: Python time, dispatches and submits per training step.

    python benchmarks/compile_wgpu.py            # W1 and W2
    python benchmarks/compile_wgpu.py --quick    # fewer rounds

(``benchmarks/compile.py`` prints the same table after its CPU ones.)

W1: the seed (MLP 4-16-1, MSE, Adam, 64 samples); W2: MLP 784-256-10,
cross-entropy, Adam, batch 128; both on ``Device.wgpu().autodiff()``. Contestants:
eager cube steps, ``ember.compile`` (the WGSL executor; from the third step a
replayed tape), and ``ember.compile`` with tapes off (the same fused launches made
one by one from Python). Each step reads its loss (``into_scalar``).

Timing. "Python us" is the wall time of the step call alone, without the loss's
read-back: the software Vulkan driver (lavapipe) runs the shaders on CPU threads
after the submit, so the read-back's time is GPU work and process time is not Python
time. Contestants run in alternating rounds (every round runs each of them for
``--steps`` steps); figures are medians over rounds of the per-round medians, the
ratio the median of per-round ratios. Dispatches and submits are counted over one
step including its read-back.

Target (issue "compile"): on wgpu, W1 makes one submit per step with at most
0.3 ms of Python.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ember
from benchmarks.common import fmt, print_table
from benchmarks.train_step import mlp
from ember import Device, Tensor
from ember.nn.loss import CrossEntropyLoss, MseLoss, Reduction
from ember.optim import AdamConfig, GradientsParams

MODES = {"eager": "eager cube", "compiled": "compiled (tape)", "untaped": "compiled, no tape"}


def contestant(workload: str, mode: str) -> tuple[Callable[[], float], Callable[[], dict]]:
    """``step()`` running one training step and returning the seconds of the step call,
    and ``count()`` returning the dispatches and submits of one step."""
    from ember.backend.fusion.wgsl import CubeExecutor

    device = Device.wgpu().autodiff()
    rng = np.random.default_rng(0)
    if workload == "W1":
        x_np = rng.uniform(-1, 1, (64, 4)).astype(np.float32)
        y_np = (x_np @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32) + 0.5).astype(np.float32)
        sizes, mse = [4, 16, 1], MseLoss()

        def loss_fn(p, t):
            return mse.forward(p, t, Reduction.MEAN)
    else:
        x_np = rng.standard_normal((128, 784)).astype(np.float32)
        y_np = rng.integers(0, 10, 128)
        sizes, ce = [784, 256, 10], CrossEntropyLoss()

        def loss_fn(p, t):
            return ce.forward(p, t)

    device.seed(0)
    x, y = Tensor.from_data(x_np, device=device), Tensor.from_data(y_np, device=device)
    optim = AdamConfig().init()

    def train_step(model, x, y):
        loss = loss_fn(model(x), y)
        return optim.step(1e-3, model, GradientsParams.from_grads(loss.backward(), model)), loss

    step = train_step if mode == "eager" else ember.compile(train_step, executor=CubeExecutor(tape=mode == "compiled"))
    state = {"model": mlp(sizes, device)}
    cube = device.inner().backend

    def one() -> float:
        start = time.perf_counter()
        model, loss = step(state["model"], x, y)
        elapsed = time.perf_counter() - start
        state["model"] = model
        loss.into_scalar()
        return elapsed

    def count() -> dict:
        cube.sync()
        cube.reset_stats()
        one()
        return cube.stats()

    return one, count


def measure(workload: str, repeats: int, steps: int) -> tuple[list[str], dict]:
    runs = {mode: contestant(workload, mode) for mode in MODES}
    for one, _ in runs.values():
        for _ in range(5):  # traces, plans, the tape's recording, kernel compiles
            one()
    rounds: dict[str, list[float]] = {mode: [] for mode in MODES}
    ratios = []
    for _ in range(repeats):
        for mode, (one, _) in runs.items():
            rounds[mode].append(statistics.median(one() for _ in range(steps)) * 1e6)
        ratios.append(rounds["compiled"][-1] / rounds["eager"][-1])
    counts = {mode: count() for mode, (_, count) in runs.items()}
    medians = {mode: statistics.median(v) for mode, v in rounds.items()}
    row = [workload] + [fmt(medians[m]) for m in MODES] + [f"{statistics.median(ratios):.3f}x"]
    row += [f"{counts[m]['launches']}/{counts[m]['submits']}" for m in MODES]
    return row, medians


def wgpu_table(repeats: int, steps: int, workloads: tuple[str, ...] = ("W1", "W2")) -> None:
    """Prints the wgpu table, or why there is none (no adapter)."""
    try:
        Device.wgpu().backend.ensure_ready()
    except Exception as error:  # no adapter, no wgpu: nothing to measure
        print(f"\nwgpu: skipped ({error})")
        return
    rows = [measure(w, repeats, steps)[0] for w in workloads]
    header = ["workload"] + [f"{name} us" for name in MODES.values()] + ["compiled/eager"]
    header += [f"{name} dispatches/submits" for name in MODES.values()]
    print_table(
        "wgpu training step: Python us per step (wall time of the step call, without the read-back; "
        "medians of alternating rounds), and dispatches/submits per step",
        header,
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--steps", type=int, default=20, help="steps per contestant per round")
    args = parser.parse_args()
    wgpu_table(3 if args.quick else 9, args.steps)


if __name__ == "__main__":
    main()
