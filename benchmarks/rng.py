"""Random numbers: flex's numpy Philox4x32-10 against numpy's own PCG64, flex's eager
draws (the compiled Philox fill compiled plans share, ``kernel/llvm/philox_fill.py``)
against that numpy Philox, and the cost of the cube runtime's lock on the
single-thread launch path.

    python benchmarks/rng.py [--quick] [--clock cpu]

Philox and PCG64, and the fill and numpy, are timed in alternating rounds (medians,
and the median of the per-round ratios). The lock figure is the uncontended ``with lock:`` a launch now
takes, against the time of a launch (a small elementwise op, queued and synced).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import alternating_us, fmt, median_us, paired_us, print_table, use_clock
from ember import Device, Distribution, DType, Tensor
from ember.backend import philox


def bench_generators(n: int, repeats: int) -> None:
    pcg = np.random.default_rng(0)
    cases = [
        (
            "uniform float32",
            lambda: philox.sample((n,), Distribution.default(), DType.FLOAT32, 5, 0),
            lambda: pcg.random(n, dtype=np.float32),
        ),
        (
            "normal float32",
            lambda: philox.sample((n,), Distribution.normal(0.0, 1.0), DType.FLOAT32, 5, 0),
            lambda: pcg.standard_normal(n, dtype=np.float32),
        ),
        (
            "bernoulli(0.5) float32",
            lambda: philox.sample((n,), Distribution.bernoulli(0.5), DType.FLOAT32, 5, 0),
            lambda: (pcg.random(n, dtype=np.float32) < 0.5).astype(np.float32),
        ),
        (
            "uniform float64",
            lambda: philox.sample((n,), Distribution.default(), DType.FLOAT64, 5, 0),
            lambda: pcg.random(n),
        ),
        (
            "normal float64",
            lambda: philox.sample((n,), Distribution.normal(0.0, 1.0), DType.FLOAT64, 5, 0),
            lambda: pcg.standard_normal(n),
        ),
    ]
    rows = []
    for name, ours, theirs in cases:
        a, b, ratio = paired_us(ours, theirs, repeats=repeats)
        rows.append([name, fmt(a / 1e3, " ms"), fmt(b / 1e3, " ms"), f"{ratio:.2f}x"])
    print_table(
        f"{n:,} values: flex Philox4x32-10 (numpy) vs numpy PCG64", ["draw", "philox", "pcg64", "philox/pcg64"], rows
    )


def bench_fill(n: int, repeats: int) -> None:
    flex = Device.flex().backend
    rows = []
    for distribution, dtype in (
        (Distribution.bernoulli(0.75), DType.FLOAT32),
        (Distribution.default(), DType.FLOAT32),
        (Distribution.bernoulli(0.75), DType.FLOAT64),
        (Distribution.uniform(-1.0, 1.0), DType.FLOAT64),
    ):
        fns = {
            "fill": lambda d=distribution, t=dtype: flex.random((n,), d, t, 5, 0),
            "numpy": lambda d=distribution, t=dtype: philox.sample((n,), d, t, 5, 0),
        }
        medians, ratios = alternating_us(fns, repeats=repeats)
        name = f"{distribution.kind} {dtype.name.lower()}"
        rows.append(
            [
                name,
                fmt(medians["fill"] / 1e3, " ms"),
                fmt(medians["numpy"] / 1e3, " ms"),
                f"{ratios['fill', 'numpy']:.3f}x",
            ]
        )
    print_table(
        f"{n:,} values: flex's eager draw (the compiled Philox fill) vs the numpy Philox",
        ["draw", "fill", "numpy", "fill/numpy"],
        rows,
    )


def bench_lock(repeats: int) -> None:
    try:
        gpu = Device.wgpu()
        x = Tensor.ones([256], device=gpu)
        runtime = gpu.backend.runtime
    except Exception as error:  # no wgpu or no adapter
        print(f"\ncube lock: skipped ({type(error).__name__}: {error})")
        return
    launches = 200

    def step() -> None:
        y = x
        for _ in range(launches):
            y = y + 1.0
        gpu.sync()

    per_launch = median_us(step, repeats=repeats) / launches
    lock = threading.RLock()

    def acquire() -> None:
        for _ in range(1000):
            with lock:
                pass

    per_lock = median_us(acquire, repeats=repeats) / 1000
    assert runtime.lock is not None
    print_table(
        "cube: the runtime lock on the single-thread launch path",
        ["", "us"],
        [
            ["one launch (+1.0 on 256 floats, synced)", fmt(per_launch)],
            ["one uncontended `with lock:`", fmt(per_lock)],
            ["lock / launch", f"{100 * per_lock / per_launch:.2f}%"],
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats, smaller draws")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall", help="the fill table's clock")
    args = parser.parse_args()
    use_clock(args.clock)
    repeats = 3 if args.quick else 9
    n = 100_000 if args.quick else 1_000_000
    bench_generators(n, repeats)
    bench_fill(n, repeats)
    bench_lock(repeats)


if __name__ == "__main__":
    main()
