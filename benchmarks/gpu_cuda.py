"""The cuda backend against PyTorch CUDA in the same process (``benchmarks/gpu.py``'s
cuda rows; runs only where an NVIDIA GPU is present).

    python benchmarks/gpu_cuda.py [--quick]
    python benchmarks/gpu.py --cuda [--quick]

Rows: matmul at 4096^3 in float32 (TF32 off on both sides) and bfloat16 (TFLOP/s);
elementwise GB/s (a fused ``x * a + b`` against torch's, and a device-to-device copy
as the bandwidth reference); W2 (MLP 784-256-10, cross-entropy, Adam, batch 128) and
W3 (small CNN, batch 64) steps, eager and compiled (``ember.compile``: a CUDA Graph),
against torch CUDA eager; and kernel launches per step (ember counts its own; torch's
are not counted). Every figure is a median of alternating rounds that end with a sync.

Targets (issue 17): matmul >= 90% of torch's; fused elementwise >= 80% of the copy
bandwidth; W2 compiled no slower than torch CUDA eager.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import print_table, try_import_torch


def _median_s(fn, sync, reps: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        times.append((time.perf_counter() - t0) / reps)
    return float(np.median(times))


def _pair(ember_fn, ember_sync, torch_fn, torch_sync, reps: int, repeats: int) -> tuple[float, float | None]:
    """Alternating rounds of ember and torch; medians of seconds per call."""
    ember_fn(), ember_sync()
    if torch_fn is not None:
        torch_fn(), torch_sync()
    e, t = [], []
    for _ in range(repeats):
        e.append(_median_s(ember_fn, ember_sync, reps, 1))
        if torch_fn is not None:
            t.append(_median_s(torch_fn, torch_sync, reps, 1))
    return float(np.median(e)), (float(np.median(t)) if t else None)


def bench_matmul(cuda, torch, repeats: int, n: int) -> list[list[str]]:
    from ember import Tensor

    rng = np.random.default_rng(0)
    a_np = rng.standard_normal((n, n)).astype(np.float32)
    b_np = rng.standard_normal((n, n)).astype(np.float32)

    def one(dtype: str) -> list[str]:
        a = Tensor.from_data(a_np, device=cuda).cast(dtype)
        b = Tensor.from_data(b_np, device=cuda).cast(dtype)
        torch_fn = tsync = None
        if torch is not None:
            torch.backends.cuda.matmul.allow_tf32 = False
            tdt = torch.float32 if dtype == "float32" else torch.bfloat16
            ta = torch.from_numpy(a_np).cuda().to(tdt)
            tb = torch.from_numpy(b_np).cuda().to(tdt)
            torch_fn, tsync = (lambda: ta @ tb), torch.cuda.synchronize
        e, t = _pair(lambda: a.matmul(b), cuda.sync, torch_fn, tsync, 5, repeats)
        flops = 2 * n**3
        return [
            f"matmul {n}^3 {dtype}",
            f"{flops / e / 1e12:.1f} TFLOP/s",
            "-" if t is None else f"{flops / t / 1e12:.1f} TFLOP/s",
            "-" if t is None else f"{t / e:.2f}x",
        ]

    return [one("float32"), one("bfloat16")]


def bench_elementwise(cuda, torch, repeats: int, n: int) -> list[list[str]]:
    from ember import Tensor

    x = Tensor.from_data(np.ones(n, np.float32), device=cuda)
    torch_fn = tsync = None
    if torch is not None:
        tx = torch.ones(n, device="cuda")
        torch_fn, tsync = (lambda: tx * 1.5 + 0.5), torch.cuda.synchronize
    e, t = _pair(lambda: x.mul_scalar(1.5).add_scalar(0.5), cuda.sync, torch_fn, tsync, 20, repeats)
    fused = _median_s(lambda: x.mul_scalar(1.5), cuda.sync, 20, repeats)  # one kernel: 8 bytes per element
    copy = None
    if torch is not None:
        ty = torch.empty_like(tx)
        copy = _median_s(lambda: ty.copy_(tx), torch.cuda.synchronize, 20, repeats)
    gbs = lambda s, passes: 8 * n * passes / s / 1e9  # noqa: E731
    rows = [
        [
            "x * a + b (two ops), GB/s",
            f"{gbs(e, 2):.0f}",
            "-" if t is None else f"{gbs(t, 2):.0f}",
            "-" if t is None else f"{t / e:.2f}x",
        ],
        [
            "one-op kernel, GB/s",
            f"{gbs(fused, 1):.0f}",
            "-" if copy is None else f"copy {gbs(copy, 1):.0f}",
            "-" if copy is None else f"{copy / fused:.2f} of copy",
        ],
    ]
    return rows


def _workloads(device):
    from benchmarks.train_step import mlp
    from ember import Module, Tensor
    from ember.nn import Conv2dConfig, LinearConfig, MaxPool2dConfig, Relu
    from ember.nn.loss import CrossEntropyLoss

    class Cnn(Module):
        conv1: Module
        conv2: Module
        pool: Module
        head: Module

        def forward(self, x):
            x = self.pool(Relu()(self.conv1(x)))
            x = self.pool(Relu()(self.conv2(x)))
            return self.head(x.flatten(1))

    rng = np.random.default_rng(0)
    ce = CrossEntropyLoss()
    x2, y2 = rng.standard_normal((128, 784)).astype(np.float32), rng.integers(0, 10, 128)
    x3, y3 = rng.standard_normal((64, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, 64)
    w2 = (mlp([784, 256, 10], device), Tensor.from_data(x2, device=device), Tensor.from_data(y2, device=device))
    w3 = (
        Cnn(
            conv1=Conv2dConfig((1, 16), (3, 3), padding=(1, 1)).init(device),
            conv2=Conv2dConfig((16, 32), (3, 3), padding=(1, 1)).init(device),
            pool=MaxPool2dConfig((2, 2)).init(),
            head=LinearConfig(1568, 10).init(device),
        ),
        Tensor.from_data(x3, device=device),
        Tensor.from_data(y3, device=device),
    )
    return {"W2 MLP 784-256-10, CE, Adam, 128": (w2, x2, y2, ce), "W3 small CNN, CE, Adam, 64": (w3, x3, y3, ce)}


def _torch_net(torch, name):
    nn = torch.nn
    if name.startswith("W2"):
        return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(1568, 10),
    )


def bench_steps(cuda, torch, repeats: int) -> list[list[str]]:
    device = cuda.autodiff()
    rows = []
    for name, (parts, x_np, y_np, ce) in _workloads(device).items():
        rows += _step_rows(cuda, torch, repeats, name, parts, x_np, y_np, ce)
    return rows


def _step_rows(cuda, torch, repeats, name, parts, x_np, y_np, ce) -> list[list[str]]:
    import ember
    from ember.optim import AdamConfig, GradientsParams

    model, x, y = parts
    device = cuda.autodiff()
    backend = cuda.backend
    rows = []
    optim = AdamConfig().init()
    state = {"model": model}

    def step(m, x, y):
        loss = ce.forward(m(x), y)
        return optim.step(1e-3, m, GradientsParams.from_grads(loss.backward(), m)), loss

    def eager():
        state["model"], loss = step(state["model"], x, y)
        loss.into_scalar()

    from ember.backend.fusion.cuda.executor import CudaExecutor

    compiled_step = ember.compile(step)
    fused_step = ember.compile(step, executor=CudaExecutor(fuse=True))
    cstate = {"model": model.fork(device), "fused": model.fork(device)}

    def compiled():
        cstate["model"], loss = compiled_step(cstate["model"], x, y)
        loss.into_scalar()

    def fused():
        cstate["fused"], loss = fused_step(cstate["fused"], x, y)
        loss.into_scalar()

    torch_fn = tsync = None
    if torch is not None:
        net = _torch_net(torch, name).cuda()
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        tx, ty = torch.from_numpy(x_np).cuda(), torch.from_numpy(y_np).cuda()

        def torch_fn():
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(net(tx), ty)
            loss.item()
            loss.backward()
            opt.step()

        tsync = torch.cuda.synchronize
    for _ in range(3):  # compile the kernels and capture the graph first
        eager()
        compiled()
        fused()
    launches = backend.stats().get("launches", 0)
    eager()
    cuda.sync()
    per_step = backend.stats().get("launches", 0) - launches
    launches = backend.stats().get("launches", 0)
    compiled()
    cuda.sync()
    per_compiled = backend.stats().get("launches", 0) - launches
    launches = backend.stats().get("launches", 0)
    fused()
    cuda.sync()
    per_fused = backend.stats().get("launches", 0) - launches
    e, t = _pair(eager, cuda.sync, torch_fn, tsync, 5, repeats)
    c, _ = _pair(compiled, cuda.sync, None, None, 5, repeats)
    f, _ = _pair(fused, cuda.sync, None, None, 5, repeats)
    ms = lambda s: f"{s * 1e3:.2f} ms"  # noqa: E731
    rows.append(
        [
            f"{name} eager ({per_step} launches)",
            ms(e),
            "-" if t is None else ms(t),
            "-" if t is None else f"{t / e:.2f}x",
        ]
    )
    rows.append(
        [
            f"{name} compiled ({per_compiled} launches outside graphs)",
            ms(c),
            "-" if t is None else ms(t),
            "-" if t is None else f"{t / c:.2f}x",
        ]
    )
    rows.append(
        [
            f"{name} compiled, fused ({per_fused} launches outside graphs)",
            ms(f),
            "-" if t is None else ms(t),
            "-" if t is None else f"{t / f:.2f}x",
        ]
    )
    return rows


def run(quick: bool = False) -> int:
    from ember import Device

    try:
        cuda = Device.cuda()
    except Exception as error:
        print(f"cuda rows: skipped ({error})")
        return 0
    torch = try_import_torch()
    if torch is not None and not torch.cuda.is_available():
        torch = None
    repeats = 3 if quick else 7
    print(
        f"cuda: {cuda!r} on {cuda.backend.runtime.name} ({cuda.backend.runtime.arch}); torch: "
        f"{'none' if torch is None else torch.__version__}"
    )
    rows = bench_matmul(cuda, torch, repeats, 2048 if quick else 4096)
    rows += bench_elementwise(cuda, torch, repeats, (1 << 24) if quick else (1 << 26))
    rows += bench_steps(cuda, torch, repeats)
    print_table(
        "cuda against torch cuda (medians of alternating rounds)",
        ["row", "ember cuda", "torch cuda", "torch time / ember time"],
        rows,
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats")
    args = parser.parse_args()
    return run(args.quick)


if __name__ == "__main__":
    sys.exit(main())
