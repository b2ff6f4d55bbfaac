"""Per-op overhead on small tensors and throughput on large ones: ember/flex
against raw numpy and PyTorch eager, in one run.

    python benchmarks/ops.py            # per-op overhead, then the linalg table
    OPENBLAS_NUM_THREADS=1 python benchmarks/ops.py linalg

Targets (issue "Core"): small ops at most 3 us above the raw numpy call; large ops
at most 1.1x raw numpy. ``ember.linalg`` (issue 28): at most 1.15x the faster of
numpy and scipy (scipy only if installed; it is no dependency of ember) on the same
call, plain and with a tracked input on the autodiff device.
``grid_sample`` forward and backward (input and grid
gradients) at ``[8, 64, 64, 64]`` on flex+autodiff: at most 1.5x PyTorch with one
thread (issue 28), timed in alternating rounds (``OPENBLAS_NUM_THREADS=1``).
FFTs (issue 28): at most 1.15x the faster of numpy.fft and
scipy.fft on the same call (scipy is optional: its column shows "-" without it); stft
against the same steps written in numpy and against torch.stft.
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ember
from benchmarks.common import alternating_us, fmt, median_us, print_table, try_import_torch
from ember import Device, Tensor, linalg
from ember.nn.functional import grid_sample


def main() -> None:
    torch = try_import_torch()
    flex = Device.flex()
    rng = np.random.default_rng(0)
    cases = []

    a = rng.standard_normal((64, 16)).astype(np.float32)
    b = rng.standard_normal((64, 16)).astype(np.float32)
    cases.append(("add 64x16", a, b, lambda x, y: x.add(y), np.add, lambda x, y: x + y))
    x = rng.standard_normal((64, 4)).astype(np.float32)
    w = rng.standard_normal((4, 16)).astype(np.float32)
    cases.append(("matmul 64x4 @ 4x16", x, w, lambda p, q: p.matmul(q), np.matmul, lambda p, q: p @ q))
    big_a = rng.standard_normal(1_000_000).astype(np.float32)
    big_b = rng.standard_normal(1_000_000).astype(np.float32)
    cases.append(("add 1M floats", big_a, big_b, lambda p, q: p.add(q), np.add, lambda p, q: p + q))
    m = rng.standard_normal((1024, 1024)).astype(np.float32)
    n = rng.standard_normal((1024, 1024)).astype(np.float32)
    cases.append(("matmul 1024^3", m, n, lambda p, q: p.matmul(q), np.matmul, lambda p, q: p @ q))

    rows = []
    for name, p, q, ember_op, numpy_op, torch_op in cases:
        tp, tq = Tensor.from_data(p, device=flex), Tensor.from_data(q, device=flex)
        t_ember = median_us(lambda f=ember_op, a=tp, b=tq: f(a, b))
        t_numpy = median_us(lambda f=numpy_op, a=p, b=q: f(a, b))
        t_torch = None
        if torch is not None:
            pp, qq = torch.from_numpy(p), torch.from_numpy(q)
            t_torch = median_us(lambda f=torch_op, a=pp, b=qq: f(a, b))
        rows.append(
            [
                name,
                fmt(t_ember),
                fmt(t_numpy),
                fmt(t_torch),
                f"{t_ember - t_numpy:+.2f}",
                f"{t_ember / t_numpy:.2f}x",
                "-" if t_torch is None else f"{t_ember / t_torch:.2f}x",
            ]
        )
    print_table(
        "ember/flex per-op time (median us per call; all libraries with their default threads)",
        ["op", "ember", "numpy", "torch", "ember-numpy us", "ember/numpy", "ember/torch"],
        rows,
    )
    grid_sample_table(torch, rng)
    spectral(torch, rng)


def grid_sample_table(torch, rng) -> None:
    """``grid_sample`` (bilinear, zeros) forward + backward at ``[8, 64, 64, 64]``."""
    x = rng.standard_normal((8, 64, 64, 64)).astype(np.float32)
    grid = rng.uniform(-1.1, 1.1, (8, 64, 64, 2)).astype(np.float32)
    seed = rng.standard_normal((8, 64, 64, 64)).astype(np.float32)
    device = Device.flex().autodiff()
    ex, eg = Tensor.from_data(x, device=device), Tensor.from_data(grid, device=device)
    es = Tensor.from_data(seed, device=device)

    def ember_step() -> None:
        a, b = ex.require_grad(), eg.require_grad()
        grads = grid_sample(a, b, align_corners=False).mul(es).sum().backward()
        a.grad(grads).to_numpy(), b.grad(grads).to_numpy()

    fns = {"ember": ember_step}
    if torch is not None:
        torch.set_num_threads(1)
        tx, tg, ts = torch.from_numpy(x), torch.from_numpy(grid), torch.from_numpy(seed)

        def torch_step() -> None:
            a, b = tx.clone().requires_grad_(), tg.clone().requires_grad_()
            (torch.nn.functional.grid_sample(a, b, align_corners=False) * ts).sum().backward()

        fns["torch"] = torch_step
    times, ratios = alternating_us(fns, repeats=5, min_time=0.2)
    ratio = ratios.get(("ember", "torch"))
    print_table(
        "grid_sample [8, 64, 64, 64], grid [8, 64, 64, 2]: forward + backward (median ms; torch 1 thread)",
        ["op", "ember", "torch", "ember/torch"],
        [
            [
                "grid_sample fwd+bwd",
                fmt(times["ember"] / 1e3),
                fmt(times.get("torch", None) and times["torch"] / 1e3),
                "-" if ratio is None else f"{ratio:.2f}x",
            ]
        ],
    )


def _linalg_cases(rng: np.random.Generator, n: int) -> list[tuple[str, tuple, object, object, object, object]]:
    """``(name, arrays, ember fn, numpy fn, scipy fn or None, torch fn)`` per op at size ``n``."""
    try:
        import scipy.linalg as sl
    except ImportError:
        sl = None
    m = rng.standard_normal((n, n))
    a = m + n * np.eye(n)
    spd = m @ m.T + n * np.eye(n)
    b = rng.standard_normal((n, 16))
    return [
        (
            f"solve {n}x{n}, 16 rhs",
            (a, b),
            linalg.solve,
            np.linalg.solve,
            None if sl is None else (lambda x, y: sl.solve(x, y, check_finite=False)),
            lambda t, x, y: t.linalg.solve(x, y),
        ),
        (
            f"cholesky {n}x{n}",
            (spd,),
            linalg.cholesky,
            np.linalg.cholesky,
            None if sl is None else (lambda x: sl.cholesky(x, lower=True, check_finite=False)),
            lambda t, x: t.linalg.cholesky(x),
        ),
        (
            f"svd {n}x{n} (reduced)",
            (m,),
            lambda x: linalg.svd(x, full_matrices=False),
            lambda x: np.linalg.svd(x, full_matrices=False),
            None if sl is None else (lambda x: sl.svd(x, full_matrices=False, check_finite=False)),
            lambda t, x: t.linalg.svd(x, full_matrices=False),
        ),
    ]


def linalg_table() -> None:
    """``ember.linalg`` on flex (numpy's LAPACK) against numpy, scipy and torch, float64,
    alternating rounds."""
    torch = try_import_torch()
    if torch is not None:
        torch.set_num_threads(1)
    flex, tracked = Device.flex(), Device.flex().autodiff()
    rng = np.random.default_rng(0)
    rows = []
    for n in (256, 1024):
        for name, arrays, ember_fn, numpy_fn, scipy_fn, torch_fn in _linalg_cases(rng, n):
            ts = [Tensor.from_data(x, device=flex) for x in arrays]
            tracked_ts = [Tensor.from_data(x, device=tracked).require_grad() for x in arrays]
            fns = {
                "ember": lambda f=ember_fn, xs=ts: f(*xs),
                "ember autodiff": lambda f=ember_fn, xs=tracked_ts: f(*xs),
                "numpy": lambda f=numpy_fn, xs=arrays: f(*xs),
            }
            if scipy_fn is not None:
                try:
                    scipy_fn(*arrays)
                    fns["scipy"] = lambda f=scipy_fn, xs=arrays: f(*xs)
                except ValueError as error:  # seen: gesdd's workspace query failing after torch's LAPACK ran
                    print(f"scipy left out of {name!r}: {error}")
            if torch is not None:
                tt = [torch.from_numpy(x) for x in arrays]
                fns["torch"] = lambda f=torch_fn, xs=tt: f(torch, *xs)
            medians, ratios = alternating_us(fns, repeats=5 if n > 512 else 9, min_time=0.05)
            best = "scipy" if "scipy" in fns and medians["scipy"] < medians["numpy"] else "numpy"
            rows.append(
                [
                    name,
                    fmt(medians["ember"]),
                    fmt(medians["ember autodiff"]),
                    fmt(medians["numpy"]),
                    fmt(medians.get("scipy")),
                    fmt(medians.get("torch")),
                    f"{ratios[('ember', best)]:.2f}x {best}",
                    f"{ratios[('ember autodiff', best)]:.2f}x",
                    "-" if torch is None else f"{ratios[('ember', 'torch')]:.2f}x",
                ]
            )
    print_table(
        "ember.linalg on flex (median us per call, float64; OPENBLAS_NUM_THREADS=1 for a fair single thread)",
        ["op", "ember", "ember autodiff", "numpy", "scipy", "torch", "ember/best", "autodiff/best", "ember/torch"],
        rows,
    )


def _numpy_stft(x: np.ndarray, window: np.ndarray, n_fft: int, hop: int, rfft) -> np.ndarray:
    """torch.stft's steps (centre with reflect padding, frame, window, rfft) in numpy."""
    padded = np.pad(x, n_fft // 2, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, n_fft)[::hop]
    return rfft(frames * window, axis=-1).T


def spectral(torch, rng) -> None:
    """rfft of 2**20 points and stft of 1 s of 16 kHz audio (n_fft 400, hop 160, hann),
    timed in alternating rounds against numpy, scipy and torch."""
    try:
        import scipy.fft as scipy_fft
    except ImportError:
        scipy_fft = None
    flex = Device.flex()
    signal = rng.standard_normal(2**20).astype(np.float32)
    audio = rng.standard_normal(16_000).astype(np.float32)
    window = ember.hann_window(400, device=flex)
    w = window.to_numpy()
    t_signal, t_audio = Tensor.from_data(signal, device=flex), Tensor.from_data(audio, device=flex)
    cases = [
        (
            "rfft 2**20 float32",
            lambda: ember.fft.rfft(t_signal),
            lambda: np.fft.rfft(signal),
            None if scipy_fft is None else (lambda: scipy_fft.rfft(signal)),
            None,
        ),
        (
            "stft 16k samples, n_fft 400, hop 160",
            lambda: ember.stft(t_audio, 400, 160, window=window),
            lambda: _numpy_stft(audio, w, 400, 160, np.fft.rfft),
            None if scipy_fft is None else (lambda: _numpy_stft(audio, w, 400, 160, scipy_fft.rfft)),
            None,
        ),
    ]
    if torch is not None:
        torch.set_num_threads(1)  # ember's FFTs use one thread; torch's OpenMP pool spins on a loaded machine
        tt_signal, tt_audio, tt_window = torch.from_numpy(signal), torch.from_numpy(audio), torch.from_numpy(w)
        cases[0] = (*cases[0][:4], lambda: torch.fft.rfft(tt_signal))
        cases[1] = (
            *cases[1][:4],
            lambda: torch.stft(tt_audio, 400, 160, window=tt_window, return_complex=True),
        )
    rows = []
    for name, ours, numpy_fn, scipy_fn, torch_fn in cases:
        fns = {"ember": ours, "numpy": numpy_fn}
        if scipy_fn is not None:
            fns["scipy"] = scipy_fn
        if torch_fn is not None:
            fns["torch"] = torch_fn
        medians, ratios = alternating_us(fns)
        best = min(("numpy", "scipy"), key=lambda k: medians.get(k, float("inf")))
        rows.append(
            [
                name,
                fmt(medians["ember"]),
                fmt(medians["numpy"]),
                fmt(medians.get("scipy")),
                fmt(medians.get("torch")),
                f"{ratios[('ember', best)]:.2f}x ({best})",
                "-" if "torch" not in fns else f"{ratios[('ember', 'torch')]:.2f}x",
            ]
        )
    print_table(
        "ember/flex spectral ops (median us per call, alternating rounds, one thread each; ratios are medians "
        "of per-round ratios)",
        ["op", "ember", "numpy", "scipy", "torch", "ember/best of numpy,scipy", "ember/torch"],
        rows,
    )


if __name__ == "__main__":
    if sys.argv[1:] != ["linalg"]:
        main()
    linalg_table()
