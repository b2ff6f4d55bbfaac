"""The fusion device against eager: W1-W4 training steps on ``Device.flex().fusion()``
and on ``Device.flex()`` (both under autodiff), in alternating rounds.

    OPENBLAS_NUM_THREADS=1 python benchmarks/fusion_device.py                # W1-W4, CPU time
    OPENBLAS_NUM_THREADS=1 python benchmarks/fusion_device.py W1 --rounds 9  # a subset
    OPENBLAS_NUM_THREADS=1 python benchmarks/fusion_device.py --clock wall

W1-W3 are benchmarks/compile.py's problems, W4 benchmarks/train_step.py's GPT (block 64,
batch 16). Each step reads the loss (``into_scalar``: the fusion device's one sync
point per step) and applies Adam. Each round runs every contestant once (eager and
fused in turn, the order alternating between rounds, so that drifting load from
other processes hits both alike); a figure is the median over rounds of the mean us
per step, the ratio the median of per-round ratios. ``--clock cpu`` (the default)
counts this process's CPU time, less sensitive to a loaded machine than wall time.
For instruction counts of W1 use ``benchmarks/ab_train_step.py --clock instructions
--workloads w1,w1f``.

Target (issue "compile, part 2"): the fusion device no slower than eager on W1-W4.
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

from benchmarks.common import blas_line, fmt, print_table
from benchmarks.compile import ember_parts
from ember import Device, Tensor
from ember.nn.loss import CrossEntropyLoss
from ember.optim import AdamConfig, GradientsParams

WORKLOADS = ("W1", "W2", "W3", "W4")
#: (steps per round, warm-up steps) per workload
STEPS = {"W1": (200, 30), "W2": (20, 5), "W3": (4, 3), "W4": (2, 3)}


def step_fn(workload: str, fused: bool) -> Callable[[], None]:
    """One training step of ``workload`` on the fusion device or on eager flex."""
    device = Device.flex().fusion().autodiff() if fused else Device.flex().autodiff()
    if workload == "W4":
        from benchmarks.gpt import ember_gpt

        rng = np.random.default_rng(0)
        device.seed(0)
        model = ember_gpt(device, vocab=65, block=64)
        x = Tensor.from_data(rng.integers(0, 65, (16, 64)), device=device)
        y = Tensor.from_data(rng.integers(0, 65, (16, 64)), device=device)
        ce = CrossEntropyLoss()

        def loss_fn(p: Tensor, t: Tensor) -> Tensor:
            return ce.forward(p.reshape([-1, 65]), t.reshape([-1]))
    else:
        model, x, y, loss_fn = ember_parts(workload, device)
    optim = AdamConfig().init()
    state = {"model": model}

    def step() -> None:
        m = state["model"]
        loss = loss_fn(m(x), y)
        loss.into_scalar()
        state["model"] = optim.step(1e-3, m, GradientsParams.from_grads(loss.backward(), m))

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", metavar="W", help=f"among {', '.join(WORKLOADS)} (default: all)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    args = parser.parse_args()
    unknown = [w for w in args.workloads if w not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workloads {unknown}: choose among {', '.join(WORKLOADS)}")
    now = time.process_time if args.clock == "cpu" else time.perf_counter
    rows = []
    for workload in args.workloads or WORKLOADS:
        steps, warmup = STEPS[workload]
        fns = {"eager": step_fn(workload, False), "fused": step_fn(workload, True)}
        for fn in fns.values():
            for _ in range(warmup):
                fn()
        times: dict[str, list[float]] = {name: [] for name in fns}
        ratios = []
        for r in range(args.rounds):
            got = {}
            for name in list(fns) if r % 2 == 0 else list(reversed(fns)):
                start = now()
                for _ in range(steps):
                    fns[name]()
                got[name] = (now() - start) / steps * 1e6
                times[name].append(got[name])
            ratios.append(got["fused"] / got["eager"])
        eager, fused = statistics.median(times["eager"]), statistics.median(times["fused"])
        rows.append([workload, fmt(eager), fmt(fused), f"{statistics.median(ratios):.2f}x"])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print_table(
        f"fusion device vs eager, {args.clock} us per training step, medians over {args.rounds} "
        f"alternating rounds (load {load:.1f})",
        ["workload", "eager", "fused", "fused/eager"],
        rows,
    )
    print(blas_line())


if __name__ == "__main__":
    main()
