"""Compiled execution: eager ember against fused ember (``Device.flex().fusion()``,
whose streams the LLVM executor compiles) and PyTorch eager, in one run.

    python benchmarks/compile.py                      # W1, W2, exact GELU
    python benchmarks/compile.py --quick              # fewer rounds
    python benchmarks/compile.py --matmul-threshold   # BLAS against generated loops

W1: the seed (MLP 4-16-1, MSE, Adam, 64 samples). W2: MLP 784-256-10,
cross-entropy, Adam, batch 128. GELU: exact (erf) GELU forward on [64, 128, 512].
Training steps run flex+autodiff (eager) against flex+fusion+autodiff (fused);
every column is the median of alternating rounds, ratios are medians of per-round
ratios. Compile times are the plans each workload builds, from a cold executor.
All of ember, numpy's BLAS (ember sets it to ``EMBER_NUM_THREADS``, default 1)
and torch run on one thread.

On wgpu, ``benchmarks/compile_wgpu.py`` (run at the end, ``--no-wgpu`` skips it)
prints compiled W1 and W2 steps' Python time, dispatches and submits per step.

Targets (issue "compile"): eager fusion on flex: W2 no slower than unfused eager,
exact GELU within 2x of torch. ``ember.compile`` rows come with that issue's
whole-step capture.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import alternating_us, fmt, print_table, try_import_torch
from benchmarks.train_step import mlp, torch_step_fn
from ember import Device, Tensor
from ember.nn.loss import CrossEntropyLoss, MseLoss, Reduction
from ember.optim import AdamConfig, GradientsParams
from ember.tensor.activation import gelu


def fresh_executor(device: Device):
    """Gives the fusion device under ``device`` a cold LLVM executor (empty plan
    caches), so the compile time of a workload can be read from it afterwards."""
    from ember.backend.fusion.llvm import LLVMExecutor

    backend = (device.inner() if device.is_autodiff() else device).backend
    backend.sync()  # ops an earlier workload left queued run with the old executor
    backend.executor = LLVMExecutor()
    return backend.executor


def ember_step(device: Device, workload: str):
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
    state = {"model": mlp(sizes, device)}

    def step():
        model = state["model"]
        loss = loss_fn(model(x), y)
        loss.into_scalar()
        state["model"] = optim.step(1e-3, model, GradientsParams.from_grads(loss.backward(), model))

    return step, (x_np, y_np, sizes)


def torch_step(torch, data):
    x_np, y_np, sizes = data
    d_in, d_hidden, d_out = sizes
    net = torch.nn.Sequential(torch.nn.Linear(d_in, d_hidden), torch.nn.ReLU(), torch.nn.Linear(d_hidden, d_out))
    if sizes[0] == 4:
        return torch_step_fn(torch, net, torch.from_numpy(x_np), torch.from_numpy(y_np), torch.nn.functional.mse_loss)
    return torch_step_fn(torch, net, torch.from_numpy(x_np), torch.from_numpy(y_np), torch.nn.functional.cross_entropy)


def training(torch, workload: str, repeats: int, rows: list, notes: list) -> None:
    eager, data = ember_step(Device.flex().autodiff(), workload)
    fused_device = Device.flex().fusion().autodiff()
    executor = fresh_executor(fused_device)
    fused, _ = ember_step(fused_device, workload)
    start = time.perf_counter()
    for _ in range(3):  # the first steps build every plan of the loop
        fused()
    warm = time.perf_counter() - start
    fns = {"eager": eager, "fused": fused}
    if torch is not None:
        fns["torch"] = torch_step(torch, data)
    medians, ratios = alternating_us(fns, repeats=repeats)
    rows.append([workload, fmt(medians["eager"]), fmt(medians["fused"]), fmt(medians.get("torch")),
                 f"{ratios[('fused', 'eager')]:.2f}x",
                 "-" if torch is None else f"{ratios[('fused', 'torch')]:.2f}x"])
    notes.append(f"{workload}: {executor.stats['plans']} plans compiled in {executor.stats['compile_s']:.2f} s "
                 f"({executor.stats['compile_cpu_s']:.2f} s of CPU; first 3 steps {warm:.2f} s)")


def gelu_forward(torch, repeats: int, rows: list, notes: list) -> None:
    x_np = np.random.default_rng(0).standard_normal((64, 128, 512)).astype(np.float32)
    eager_x = Tensor.from_data(x_np, device=Device.flex())
    fused_device = Device.flex().fusion()
    executor = fresh_executor(fused_device)
    fused_x = Tensor.from_data(x_np, device=fused_device)
    kept = {}

    def eager():
        kept["e"] = gelu(eager_x)

    def fused():
        kept["f"] = gelu(fused_x)
        fused_device.sync()  # runs the stream: the result is computed, not copied

    fns = {"eager": eager, "fused": fused}
    if torch is not None:
        xt = torch.from_numpy(x_np)

        def reference():
            kept["t"] = torch.nn.functional.gelu(xt)

        fns["torch"] = reference
    fused()
    np.testing.assert_allclose(kept["f"].to_data().to_numpy(), kept["e"].to_data().to_numpy() if "e" in kept else
                               gelu(eager_x).to_data().to_numpy(), atol=1e-6)
    medians, ratios = alternating_us(fns, repeats=repeats, min_time=0.2)
    rows.append(["exact GELU [64,128,512]", fmt(medians["eager"]), fmt(medians["fused"]), fmt(medians.get("torch")),
                 f"{ratios[('fused', 'eager')]:.2f}x",
                 "-" if torch is None else f"{ratios[('fused', 'torch')]:.2f}x"])
    notes.append(f"GELU: {executor.stats['plans']} plan compiled in {executor.stats['compile_s']:.2f} s "
                 f"({executor.stats['compile_cpu_s']:.2f} s of CPU)")


def matmul_threshold(repeats: int) -> None:
    """sgemm through the fused path against generated loops, over matmul sizes: where
    BLAS starts to win is ``BLAS_THRESHOLD`` in ember/backend/fusion/llvm/support.py."""
    from ember.backend.flex import FlexBackend
    from ember.backend.fusion.expand import GraphBuilder, Value
    from ember.backend.fusion.graph import Aval, Graph
    from ember.backend.fusion.llvm import LLVMExecutor

    flex = FlexBackend()
    rows = []
    for m, k, n in [(8, 8, 8), (16, 16, 16), (64, 4, 16), (64, 16, 1), (32, 32, 32), (64, 16, 16), (64, 32, 32),
                    (64, 64, 64), (128, 64, 64), (128, 128, 128)]:
        timings = {}
        for label, threshold in (("blas", 1), ("loops", 1 << 62)):
            graph = Graph()
            ops = GraphBuilder(graph)
            a_ref = graph.add_input(Aval((m, k), np.dtype(np.float32)))
            b_ref = graph.add_input(Aval((k, n), np.dtype(np.float32)))
            out = ops.matmul(Value(a_ref, graph.avals[a_ref]), Value(b_ref, graph.avals[b_ref]))
            graph.outputs = [out.ref]
            plan = LLVMExecutor(blas_threshold=threshold).plan(graph)
            inputs = [np.random.rand(m, k).astype(np.float32), np.random.rand(k, n).astype(np.float32)]
            timings[label] = lambda plan=plan, inputs=inputs: plan.run(flex, inputs, [])
        medians, ratios = alternating_us(timings, repeats=repeats)
        rows.append([f"{m}x{k}x{n}", str(m * k * n), fmt(medians["blas"]), fmt(medians["loops"]),
                     f"{ratios[('loops', 'blas')]:.2f}x"])
    print_table("matmul through a plan, us per run (generated loops / BLAS < 1: loops win)",
                ["m x k x n", "mult-adds", "blas", "loops", "loops/blas"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--matmul-threshold", action="store_true", help="time BLAS against generated loops")
    parser.add_argument("--no-wgpu", action="store_true", help="skip the wgpu table (benchmarks/compile_wgpu.py)")
    args = parser.parse_args()
    repeats = 5 if args.quick else 11
    torch = try_import_torch()
    if torch is not None:
        torch.set_num_threads(1)
    if args.matmul_threshold:
        matmul_threshold(repeats)
        return
    rows: list[list[str]] = []
    notes: list[str] = []
    for workload in ("W1", "W2"):
        training(torch, workload, repeats, rows, notes)
    gelu_forward(torch, repeats, rows, notes)
    print_table("median us per step (per call for GELU); ratios are medians of per-round ratios",
                ["workload", "eager", "fused", "torch", "fused/eager", "fused/torch"], rows)
    print()
    for note in notes:
        print(note)
    if not args.no_wgpu:
        from benchmarks.compile_wgpu import wgpu_table

        wgpu_table(3 if args.quick else 9, 20)


if __name__ == "__main__":
    main()
