"""Timing helpers shared by the benchmarks: medians of several repeats."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable


def median_us(fn: Callable[[], object], *, repeats: int = 7, min_time: float = 0.05) -> float:
    """Median microseconds per call over ``repeats`` runs, each at least ``min_time`` s."""
    fn()
    number = 1
    while True:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            break
        number *= 2
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number * 1e6)
    return statistics.median(samples)


def blas_line() -> str:
    """Which float32 products ember runs: OpenBLAS's kernel set (its core type, and
    ``OPENBLAS_CORETYPE`` where the environment pins it) or ember's own (``EMBER_GEMM``).
    A pin to narrower kernels than the host has (``Haswell`` on an AVX-512 host) slows
    numpy's BLAS and so ember's eager products; figures should say which ran."""
    from ember.backend.flex import blas
    from ember.backend.fusion.llvm.sgemm import GEMM_ENV, own_sgemm

    lib = blas.load()
    core = lib.core if lib is not None else "no BLAS"
    pinned = os.environ.get("OPENBLAS_CORETYPE")
    setting = os.environ.get(GEMM_ENV, "auto")
    chosen = "ember's own product" if own_sgemm() is not None else "OpenBLAS"
    pin = f" (pinned: OPENBLAS_CORETYPE={pinned})" if pinned else " (its own choice)"
    return f"products: OpenBLAS core {core}{pin}; {GEMM_ENV}={setting}: inference plans multiply with {chosen}"


def try_import_torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def print_table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))


def fmt(x: float | None, unit: str = "") -> str:
    if x is None:
        return "-"
    if x >= 1000:
        return f"{x:,.0f}{unit}"
    if x >= 10:
        return f"{x:.1f}{unit}"
    return f"{x:.2f}{unit}"


def paired_us(
    fn_a: Callable[[], object], fn_b: Callable[[], object], *, repeats: int = 9, min_time: float = 0.05
) -> tuple[float, float, float]:
    """Time two workloads in alternating rounds (so that drifting machine load hits
    both alike): median us per call of each, and the median of the per-round ratios a/b."""
    fn_a()
    fn_b()

    def calibrate(fn: Callable[[], object]) -> int:
        number = 1
        while True:
            start = time.perf_counter()
            for _ in range(number):
                fn()
            if time.perf_counter() - start >= min_time:
                return number
            number *= 2

    number_a, number_b = calibrate(fn_a), calibrate(fn_b)
    samples_a, samples_b = [], []
    for _ in range(repeats):
        for fn, number, samples in ((fn_a, number_a, samples_a), (fn_b, number_b, samples_b)):
            start = time.perf_counter()
            for _ in range(number):
                fn()
            samples.append((time.perf_counter() - start) / number * 1e6)
    ratios = [a / b for a, b in zip(samples_a, samples_b)]
    return statistics.median(samples_a), statistics.median(samples_b), statistics.median(ratios)


#: The clock :func:`alternating_us` uses when given none: wall-clock time unless a
#: script's ``--clock cpu`` chose the process's CPU time (:func:`use_clock`).
CLOCK: Callable[[], float] = time.perf_counter


def use_clock(name: str) -> None:
    """``"wall"`` or ``"cpu"``: the default clock of :func:`alternating_us`."""
    global CLOCK
    CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}[name]


def alternating_us(
    fns: dict[str, Callable[[], object]],
    *,
    repeats: int = 9,
    min_time: float = 0.05,
    clock: Callable[[], float] | None = None,
) -> tuple[dict[str, float], dict[tuple[str, str], float]]:
    """Several workloads timed in alternating rounds (each round runs every one of
    them): the median us per call of each, and for each ordered pair the median of
    the per-round ratios. ``clock=time.process_time`` measures CPU time (all the
    process's threads) instead of wall-clock time: on a machine shared with other
    load, the scheduler stretches a longer call's wall-clock time more. Without
    ``clock``: :data:`CLOCK` (a script's ``--clock cpu`` sets it, see :func:`use_clock`)."""
    clock = clock or CLOCK
    numbers = {}
    for name, fn in fns.items():
        fn()
        number = 1
        while True:
            start = clock()
            for _ in range(number):
                fn()
            if clock() - start >= min_time:
                break
            number *= 2
        numbers[name] = number
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            number = numbers[name]
            start = clock()
            for _ in range(number):
                fn()
            samples[name].append((clock() - start) / number * 1e6)
    medians = {name: statistics.median(s) for name, s in samples.items()}
    ratios = {
        (a, b): statistics.median(x / y for x, y in zip(samples[a], samples[b])) for a in fns for b in fns if a != b
    }
    return medians, ratios
