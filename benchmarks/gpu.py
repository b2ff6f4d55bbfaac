"""The cube (wgpu) backend against flex, and PyTorch on the same device when it has
one: matmul GFLOP/s, elementwise GB/s, per-launch overhead, and the seed program's
time per training step.

    python benchmarks/gpu.py [--quick]

Every figure is a median of several runs; GPU timings end with ``device.sync()`` so
they count the work, not just its queuing. Where PyTorch has no GPU (the CPU wheel),
its CPU figures are printed for reference and labelled ``torch-cpu``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import fmt, median_us, print_table, try_import_torch
from ember import Device, DeviceKind, Distribution, Module, Tensor
from ember.nn import Linear, LinearConfig, Relu
from ember.nn.loss import MseLoss, Reduction
from ember.optim import AdamConfig, GradientsParams


def torch_device(torch) -> tuple[str, str]:
    """(torch device, label): the GPU torch has, else its CPU."""
    if torch is None:
        return "", ""
    if torch.cuda.is_available():
        return "cuda", f"torch-cuda ({torch.cuda.get_device_name(0)})"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps", "torch-mps"
    return "cpu", "torch-cpu"


def torch_sync(torch, dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()
    elif dev == "mps":
        torch.mps.synchronize()


def timed(fn, sync, reps: int, repeats: int) -> float:
    """Median seconds per call of ``fn`` over ``repeats`` runs of ``reps`` calls and a sync."""

    def run():
        for _ in range(reps):
            fn()
        sync()

    return median_us(run, repeats=repeats, min_time=0.0) / reps / 1e6


def bench_matmul(gpu, torch, tdev, tlabel, sizes, repeats):
    rows = []
    rng = np.random.default_rng(0)
    for n in sizes:
        a = rng.standard_normal((n, n)).astype(np.float32)
        b = rng.standard_normal((n, n)).astype(np.float32)
        flops = 2.0 * n**3
        ga, gb = Tensor.from_data(a, device=gpu), Tensor.from_data(b, device=gpu)
        reps = max(1, 2**22 // n**2 // 8)
        t_gpu = timed(lambda x=ga, y=gb: x.matmul(y), gpu.sync, reps, repeats)
        fa, fb = Tensor.from_data(a, device=Device.flex()), Tensor.from_data(b, device=Device.flex())
        t_flex = timed(lambda x=fa, y=fb: x.matmul(y), lambda: None, reps, repeats)
        t_torch = None
        if torch is not None:
            ta, tb = torch.from_numpy(a).to(tdev), torch.from_numpy(b).to(tdev)
            t_torch = timed(lambda x=ta, y=tb: x @ y, lambda: torch_sync(torch, tdev), reps, repeats)
        row = [f"{n}x{n} @ {n}x{n}", fmt(flops / t_gpu / 1e9), fmt(flops / t_flex / 1e9)]
        row += [fmt(None if t_torch is None else flops / t_torch / 1e9),
                "-" if t_torch is None else f"{t_torch / t_gpu:.2f}x"]
        rows.append(row)
    print_table("matmul float32, GFLOP/s (higher is better)",
                ["size", "cube", "flex", tlabel or "torch", f"cube vs {tlabel or 'torch'}"], rows)


def bench_elementwise(gpu, torch, tdev, tlabel, sizes, repeats):
    rows = []
    rng = np.random.default_rng(1)
    for n in sizes:
        a = rng.standard_normal(n).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32)
        moved = 3 * 4 * n  # two reads, one write
        ga, gb = Tensor.from_data(a, device=gpu), Tensor.from_data(b, device=gpu)
        reps = max(1, 2**24 // n)
        t_gpu = timed(lambda x=ga, y=gb: x.add(y), gpu.sync, reps, repeats)
        fa, fb = Tensor.from_data(a, device=Device.flex()), Tensor.from_data(b, device=Device.flex())
        t_flex = timed(lambda x=fa, y=fb: x.add(y), lambda: None, reps, repeats)
        t_torch = None
        if torch is not None:
            ta, tb = torch.from_numpy(a).to(tdev), torch.from_numpy(b).to(tdev)
            t_torch = timed(lambda x=ta, y=tb: x + y, lambda: torch_sync(torch, tdev), reps, repeats)
        rows.append([f"add {n:,} floats", fmt(moved / t_gpu / 1e9), fmt(moved / t_flex / 1e9),
                     fmt(None if t_torch is None else moved / t_torch / 1e9),
                     "-" if t_torch is None else f"{t_torch / t_gpu:.2f}x"])
    print_table("elementwise add float32, GB/s moved (higher is better)",
                ["op", "cube", "flex", tlabel or "torch", f"cube vs {tlabel or 'torch'}"], rows)


def bench_overheads(gpu, repeats):
    backend = gpu.backend
    small = Tensor.ones([64], device=gpu)
    t_launch = timed(lambda: small.add_scalar(1.0), gpu.sync, 200, repeats)
    t_read = median_us(lambda: small.to_numpy(), repeats=repeats, min_time=0.0) / 1e6
    before = backend.stats()["compiles"]
    start = time.perf_counter()
    for k in range(5):  # five expressions never compiled before
        small.mul_scalar(float(k)).remainder_scalar(3.0 + k).atan2(small).sinh().erf()
    gpu.sync()
    compiles = backend.stats()["compiles"] - before
    t_compile = (time.perf_counter() - start) / max(compiles, 1)
    rows = [
        ["one small elementwise op: queue + run (200 per sync)", fmt(t_launch * 1e6, " us")],
        ["read back 64 floats (submit + map)", fmt(t_read * 1e6, " us")],
        [f"generate + compile a new kernel ({compiles} timed)", fmt(t_compile * 1e3, " ms")],
    ]
    print_table("cube overheads (median)", ["what", "time"], rows)


class Mlp(Module):
    l1: Linear
    act: Relu
    l2: Linear

    def forward(self, x: Tensor) -> Tensor:
        return self.l2(self.act(self.l1(x)))


def seed_step_time(device: Device, steps: int, repeats: int) -> tuple[float, float]:
    """Median seconds per step, and kernel launches per step (cube only, else 0)."""
    device.seed(42)
    x = Tensor.random([64, 4], Distribution.uniform(-1.0, 1.0), device=device)
    y = x.matmul(Tensor.from_floats([[1.0], [-2.0], [0.5], [3.0]], device=device)).add_scalar(0.5)
    state = {"model": Mlp(l1=LinearConfig(4, 16).init(device), act=Relu(), l2=LinearConfig(16, 1).init(device))}
    optim = AdamConfig().init()

    def step():
        model = state["model"]
        loss = MseLoss().forward(model(x), y, Reduction.MEAN)
        loss.into_scalar()
        grads = GradientsParams.from_grads(loss.backward(), model)
        state["model"] = optim.step(1e-2, model, grads)

    for _ in range(5):
        step()
    inner = device.inner().backend
    launches = 0.0
    if hasattr(inner, "stats"):
        before = inner.stats()["launches"]
        for _ in range(steps):
            step()
        launches = (inner.stats()["launches"] - before) / steps
    return timed(step, device.sync, steps, repeats), launches


def torch_step_time(torch, dev: str, steps: int, repeats: int) -> float:
    torch.manual_seed(42)
    x = (torch.rand(64, 4, device=dev) * 2 - 1)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]], device=dev) + 0.5
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(dev)
    optim = torch.optim.Adam(model.parameters(), lr=1e-2, eps=1e-5)

    def step():
        optim.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.item()
        loss.backward()
        optim.step()

    for _ in range(5):
        step()
    return timed(step, lambda: torch_sync(torch, dev), steps, repeats)


def bench_seed_step(gpu, torch, tdev, tlabel, steps, repeats):
    rows = []
    t_gpu, launches = seed_step_time(gpu.autodiff(), steps, repeats)
    t_flex, _ = seed_step_time(Device.flex().autodiff(), steps, repeats)
    rows.append(["cube+autodiff", fmt(t_gpu * 1e3, " ms"), f"{launches:.0f} launches/step", "1.00x"])
    rows.append(["flex+autodiff", fmt(t_flex * 1e3, " ms"), "-", f"{t_flex / t_gpu:.2f}x"])
    if torch is not None:
        if tdev == "cpu":  # the cores this process may use, not the machine's
            torch.set_num_threads(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)
        t_torch = torch_step_time(torch, tdev, steps, repeats)
        rows.append([tlabel, fmt(t_torch * 1e3, " ms"), "-", f"{t_torch / t_gpu:.2f}x"])
    print_table("the seed program: one training step (forward, loss.into_scalar(), backward, Adam), median",
                ["device", "time/step", "kernels", "vs cube (>1: cube faster)"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats")
    parser.add_argument("--kind", default="default", choices=[k.name.lower() for k in DeviceKind])
    args = parser.parse_args()
    gpu = Device.wgpu(DeviceKind[args.kind.upper()])
    runtime = gpu.backend.ensure_ready()
    torch = try_import_torch()
    tdev, tlabel = torch_device(torch)
    if torch is not None and tdev == "cpu" and hasattr(os, "sched_getaffinity"):
        torch.set_num_threads(len(os.sched_getaffinity(0)))
    repeats = 3 if args.quick else 5
    print(f"cube: {gpu!r} on {runtime.name}; float16 {'native' if runtime.native_f16 else 'in 32-bit words'}")
    if torch is not None:
        print(f"torch {torch.__version__}: {tlabel}" + ("  (no GPU in this torch: CPU figures, for reference)" if tdev == "cpu" else ""))
    bench_overheads(gpu, repeats)
    bench_elementwise(gpu, torch, tdev, tlabel, [2**16, 2**20] if args.quick else [2**16, 2**20, 2**22], repeats)
    bench_matmul(gpu, torch, tdev, tlabel, [128, 256] if args.quick else [128, 256, 512, 1024], repeats)
    bench_seed_step(gpu, torch, tdev, tlabel, 10 if args.quick else 30, repeats)


if __name__ == "__main__":
    main()
