"""Per-op overhead on small tensors and throughput on large ones: ember/flex
against raw numpy and PyTorch eager, in one run.

    python benchmarks/ops.py

Targets (issue "Core"): small ops at most 3 us above the raw numpy call; large ops
at most 1.1x raw numpy. ``grid_sample`` forward and backward (input and grid
gradients) at ``[8, 64, 64, 64]`` on flex+autodiff: at most 1.5x PyTorch with one
thread (issue 28), timed in alternating rounds (``OPENBLAS_NUM_THREADS=1``).
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import alternating_us, fmt, median_us, print_table, try_import_torch
from ember import Device, Tensor
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


if __name__ == "__main__":
    main()
