"""Compiled execution: W1, W2 and W3 training steps as eager ember, fused ember
(``Device.flex().fusion()``), compiled ember (``ember.compile``), PyTorch eager,
``torch.compile`` and JAX ``jit``, in one run; exact GELU forward for the fusion
device.

    python benchmarks/compile.py                      # everything
    python benchmarks/compile.py --quick              # fewer rounds, no torch.compile
    python benchmarks/compile.py --workloads W1 W2    # a subset
    python benchmarks/compile.py --matmul-threshold   # BLAS against generated loops
    python benchmarks/compile.py --workloads W3 --conv-chains  # also ember.compile without conv chains

W1: the seed (MLP 4-16-1, MSE, Adam, 64 samples). W2: MLP 784-256-10,
cross-entropy, Adam, batch 128. W3: small CNN (conv 1->16 3x3, relu, max pool 2,
conv 16->32 3x3, relu, max pool 2, linear), cross-entropy, Adam, batch 64 of
1x28x28. Every step includes reading the loss (``into_scalar``/``item``/``float``).

Timing. Each workload's contestants run in alternating rounds (each round runs
every one of them, so drifting load from other processes hits all alike); every
figure is the median over rounds of the mean per step, for wall time and for CPU
time (``time.process_time``: this process's threads; less sensitive to other
processes on a shared machine, but it counts every thread a library starts).
Ratios are medians of per-round ratios. ember sets its BLAS to one thread
(``EMBER_NUM_THREADS``, default 1) and torch runs on one thread; JAX keeps its
defaults (on an idle machine, all cores); ``--threads N`` runs ember and torch on N
threads and pins the process to N cores, for ratios at equal resources. Compile times: for compiled ember, the traces and plans of the first
three steps (from a cold executor: ``ember.compile`` replays a trace's first run
and compiles it from its second); for torch.compile and JAX, the first steps.

Targets (issue "compile"): compiled W1 at most 10 us per step and at most 0.1x JAX
jit; compiled W2 at most 0.75x JAX jit; compiled W3 at most 0.8x PyTorch eager;
compile time for W1 and W2 under 1 s each. Eager fusion on flex: W2 no slower
than unfused eager, exact GELU within 2x of torch.

On wgpu, ``benchmarks/compile_wgpu.py`` (run at the end, ``--no-wgpu`` skips it)
prints compiled W1 and W2 steps' Python time, dispatches and submits per step.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import alternating_us, blas_line, fmt, print_table, try_import_torch
from benchmarks.train_step import cnn, mlp
from ember import Device, Tensor
from ember.nn.loss import CrossEntropyLoss, MseLoss, Reduction
from ember.optim import AdamConfig, GradientsParams
from ember.tensor.activation import gelu

WORKLOADS = ("W1", "W2", "W3")
LR = 1e-3
EPS = 1e-5  # ember's Adam default; torch and JAX are set to it


# ---------------------------------------------------------------------- problems
def problem(workload: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    if workload == "W1":
        x = rng.uniform(-1, 1, (64, 4)).astype(np.float32)
        return x, (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32) + 0.5).astype(np.float32)
    if workload == "W2":
        return rng.standard_normal((128, 784)).astype(np.float32), rng.integers(0, 10, 128)
    return rng.standard_normal((64, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, 64)


def ember_parts(workload: str, device: Device):
    """(model, x, y, loss function) of a workload on ``device``."""
    x_np, y_np = problem(workload)
    device.seed(0)
    x, y = Tensor.from_data(x_np, device=device), Tensor.from_data(y_np, device=device)
    if workload == "W1":
        mse = MseLoss()
        return mlp([4, 16, 1], device), x, y, lambda p, t: mse.forward(p, t, Reduction.MEAN)
    ce = CrossEntropyLoss()
    model = mlp([784, 256, 10], device) if workload == "W2" else cnn(device)
    return model, x, y, lambda p, t: ce.forward(p, t)


def ember_step(workload: str, kind: str, executor=None) -> Callable[[], None]:
    """One training step: ``eager`` (flex+autodiff), ``fused`` (flex+fusion+autodiff)
    or ``compiled`` (``ember.compile`` of the eager step, on ``executor``)."""
    import ember

    device = Device.flex().fusion().autodiff() if kind == "fused" else Device.flex().autodiff()
    model, x, y, loss_fn = ember_parts(workload, device)
    optim = AdamConfig().init()

    def train_step(model, x, y):
        loss = loss_fn(model(x), y)
        grads = GradientsParams.from_grads(loss.backward(), model)
        return optim.step(LR, model, grads), loss

    fn = ember.compile(train_step, executor=executor) if kind == "compiled" else train_step
    state = {"model": model}

    def step() -> None:
        state["model"], loss = fn(state["model"], x, y)
        loss.into_scalar()

    return step


def torch_step(torch, workload: str, compiled: bool = False) -> Callable[[], None]:
    x_np, y_np = problem(workload)
    nn = torch.nn
    torch.manual_seed(0)
    if workload == "W1":
        net, loss_fn = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1)), nn.functional.mse_loss
    elif workload == "W2":
        net, loss_fn = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)), nn.functional.cross_entropy
    else:
        net = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(1568, 10),
        )
        loss_fn = nn.functional.cross_entropy
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
    opt = torch.optim.Adam(net.parameters(), lr=LR, eps=EPS)
    forward = torch.compile(net) if compiled else net
    update = torch.compile(opt.step) if compiled else opt.step

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(forward(x), y)
        loss.item()
        loss.backward()
        update()

    return step


def jax_step(workload: str) -> Callable[[], None] | None:
    """The step under ``jax.jit`` (Adam written out: optax is not needed)."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    x_np, y_np = problem(workload)
    key = jax.random.PRNGKey(0)

    def uniform(key, shape, fan_in):
        bound = 1 / fan_in**0.5
        return jax.random.uniform(key, shape, minval=-bound, maxval=bound)

    keys = jax.random.split(key, 8)
    if workload in ("W1", "W2"):
        sizes = [4, 16, 1] if workload == "W1" else [784, 256, 10]
        params = [(uniform(k, (a, b), a), jnp.zeros(b)) for k, (a, b) in zip(keys, itertools.pairwise(sizes))]

        def forward(params, x):
            for i, (w, b) in enumerate(params):
                x = x @ w + b
                if i < len(params) - 1:
                    x = jax.nn.relu(x)
            return x
    else:
        params = [
            (uniform(keys[0], (16, 1, 3, 3), 9), jnp.zeros(16)),
            (uniform(keys[1], (32, 16, 3, 3), 144), jnp.zeros(32)),
            (uniform(keys[2], (1568, 10), 1568), jnp.zeros(10)),
        ]

        def conv(x, w, b):
            y = jax.lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)))
            return y + b[None, :, None, None]

        def pool(x):
            return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

        def forward(params, x):
            (w1, b1), (w2, b2), (w3, b3) = params
            x = pool(jax.nn.relu(conv(x, w1, b1)))
            x = pool(jax.nn.relu(conv(x, w2, b2)))
            return x.reshape(x.shape[0], -1) @ w3 + b3

    def loss_fn(params, x, y):
        out = forward(params, x)
        if workload == "W1":
            return jnp.mean((out - y) ** 2)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(out), y[:, None], 1))

    tree = jax.tree_util

    @jax.jit
    def update(params, m, v, t, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        t = t + 1
        m = tree.tree_map(lambda a, g: 0.9 * a + 0.1 * g, m, grads)
        v = tree.tree_map(lambda a, g: 0.999 * a + 0.001 * g * g, v, grads)
        c1, c2 = 1 - 0.9**t, 1 - 0.999**t
        params = tree.tree_map(lambda p, a, b: p - LR / c1 * a / (jnp.sqrt(b / c2) + EPS), params, m, v)
        return params, m, v, t, loss

    x, y = jnp.asarray(x_np), jnp.asarray(y_np.astype(np.int32) if workload != "W1" else y_np)
    zeros = tree.tree_map(jnp.zeros_like, params)
    state = [params, zeros, zeros, jnp.zeros((), jnp.float32)]

    def step() -> None:
        state[0], state[1], state[2], state[3], loss = update(*state, x, y)
        float(loss)

    return step


# ---------------------------------------------------------------------- timing
def alternating(fns: dict[str, Callable[[], None]], repeats: int, min_time: float):
    """Wall and CPU microseconds per call of each function, in alternating rounds:
    (wall medians, CPU medians, wall ratios, CPU ratios), ratios as medians of the
    per-round ratios of each ordered pair."""
    numbers = {}
    for name, fn in fns.items():
        fn()
        number = 1
        while True:
            start = time.perf_counter()
            for _ in range(number):
                fn()
            if time.perf_counter() - start >= min_time:
                break
            number *= 2
        numbers[name] = number
    wall: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            number = numbers[name]
            start, start_cpu = time.perf_counter(), time.process_time()
            for _ in range(number):
                fn()
            cpu[name].append((time.process_time() - start_cpu) / number * 1e6)
            wall[name].append((time.perf_counter() - start) / number * 1e6)

    def ratios(samples):
        return {
            (a, b): statistics.median(x / y for x, y in zip(samples[a], samples[b])) for a in fns for b in fns if a != b
        }

    return (
        {n: statistics.median(s) for n, s in wall.items()},
        {n: statistics.median(s) for n, s in cpu.items()},
        ratios(wall),
        ratios(cpu),
    )


def timed_start(step: Callable[[], None], calls: int = 3) -> float:
    """Seconds of the first ``calls`` steps (traces, compiles, warm-up)."""
    start = time.perf_counter()
    for _ in range(calls):
        step()
    return time.perf_counter() - start


NAMES = {
    "eager": "ember eager",
    "fused": "ember fused",
    "compiled": "ember.compile",
    "torch": "torch eager",
    "torch.compile": "torch.compile",
    "jax": "jax.jit",
}


def training(
    torch, workload: str, repeats: int, use_torch_compile: bool, tables: dict, notes: list, conv_chains: bool = False
) -> None:
    from ember.backend.fusion.llvm import LLVMExecutor

    fns: dict[str, Callable[[], None]] = {}
    fns["eager"] = ember_step(workload, "eager")
    fused_device = Device.flex().fusion().autodiff()
    fused_executor = fresh_executor(fused_device)
    fns["fused"] = ember_step(workload, "fused")
    fused_start = timed_start(fns["fused"])
    executor = LLVMExecutor()
    fns["compiled"] = ember_step(workload, "compiled", executor)
    compiled_start = timed_start(fns["compiled"])
    notes.append(
        f"{workload} ember.compile: {executor.stats['plans']} plans compiled in "
        f"{executor.stats['compile_s']:.2f} s ({executor.stats['compile_cpu_s']:.2f} s of CPU); first 3 "
        f"steps {compiled_start:.2f} s (2 traces: Adam's first step, without moments, is replayed; "
        "the next trace compiles on its second run)"
    )
    notes.append(
        f"{workload} fused: {fused_executor.stats['plans']} plans compiled in "
        f"{fused_executor.stats['compile_s']:.2f} s; first 3 steps {fused_start:.2f} s"
    )
    if torch is not None:
        fns["torch"] = torch_step(torch, workload)
        if use_torch_compile:
            try:
                fns["torch.compile"] = torch_step(torch, workload, compiled=True)
                notes.append(f"{workload} torch.compile: first 3 steps {timed_start(fns['torch.compile']):.1f} s")
            except Exception as error:  # no C compiler, an unsupported platform...
                fns.pop("torch.compile", None)
                notes.append(f"{workload} torch.compile failed: {type(error).__name__}: {str(error)[:80]}")
    if conv_chains:  # the same compiled step with each conv, relu and pool as separate passes
        fns["unchained"] = ember_step(workload, "compiled", LLVMExecutor(conv_chains=False))
        timed_start(fns["unchained"])
    jax_fn = jax_step(workload)
    if jax_fn is not None:
        fns["jax"] = jax_fn
        notes.append(f"{workload} jax.jit: first step {timed_start(jax_fn, 1):.2f} s")
    min_time = 0.05 if workload != "W3" else 0.02
    wall, cpu, wall_ratios, cpu_ratios = alternating(fns, repeats, min_time)
    tables["wall"].append([workload] + [fmt(wall.get(k)) for k in NAMES])
    tables["cpu"].append([workload] + [fmt(cpu.get(k)) for k in NAMES])
    for other in ("eager", "fused", "torch", "torch.compile", "jax"):
        if other in fns:
            tables["ratios"].append(
                [
                    workload,
                    f"ember.compile / {NAMES[other]}",
                    f"{wall_ratios[('compiled', other)]:.3f}x",
                    f"{cpu_ratios[('compiled', other)]:.3f}x",
                ]
            )
    if conv_chains:
        tables["ratios"].append(
            [
                workload,
                "ember.compile / without conv chains",
                f"{wall_ratios[('compiled', 'unchained')]:.3f}x",
                f"{cpu_ratios[('compiled', 'unchained')]:.3f}x",
            ]
        )
        notes.append(
            f"{workload} ember.compile without conv chains: {fmt(wall['unchained'])} us wall, "
            f"{fmt(cpu['unchained'])} us CPU per step"
        )


def fresh_executor(device: Device):
    """Gives the fusion device under ``device`` a cold LLVM executor (empty plan
    caches), so the compile time of a workload can be read from it afterwards."""
    from ember.backend.fusion.llvm import LLVMExecutor

    backend = (device.inner() if device.is_autodiff() else device).backend
    backend.sync()  # ops an earlier workload left queued run with the old executor
    backend.executor = LLVMExecutor()
    return backend.executor


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
    np.testing.assert_allclose(kept["f"].to_data().to_numpy(), gelu(eager_x).to_data().to_numpy(), atol=1e-6)
    medians, ratios = alternating_us(fns, repeats=repeats, min_time=0.2)
    rows.append(
        [
            "exact GELU [64,128,512]",
            fmt(medians["eager"]),
            fmt(medians["fused"]),
            fmt(medians.get("torch")),
            f"{ratios[('fused', 'eager')]:.2f}x",
            "-" if torch is None else f"{ratios[('fused', 'torch')]:.2f}x",
        ]
    )
    notes.append(
        f"GELU: {executor.stats['plans']} plan compiled in {executor.stats['compile_s']:.2f} s "
        f"({executor.stats['compile_cpu_s']:.2f} s of CPU)"
    )


def matmul_threshold(repeats: int) -> None:
    """sgemm through the fused path against generated loops, over matmul sizes: where
    BLAS starts to win is ``BLAS_THRESHOLD`` in ember/backend/fusion/llvm/support.py."""
    from ember.backend.flex import FlexBackend
    from ember.backend.fusion.graph import Aval, Graph
    from ember.backend.fusion.llvm import LLVMExecutor
    from ember.backend.fusion.primitive_graph import GraphBuilder, Value

    flex = FlexBackend()
    rows = []
    for m, k, n in [
        (8, 8, 8),
        (16, 16, 16),
        (64, 4, 16),
        (64, 16, 1),
        (32, 32, 32),
        (64, 16, 16),
        (64, 32, 32),
        (64, 64, 64),
        (128, 64, 64),
        (128, 128, 128),
    ]:
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
        rows.append(
            [
                f"{m}x{k}x{n}",
                str(m * k * n),
                fmt(medians["blas"]),
                fmt(medians["loops"]),
                f"{ratios[('loops', 'blas')]:.2f}x",
            ]
        )
    print_table(
        "matmul through a plan, us per run (generated loops / BLAS < 1: loops win)",
        ["m x k x n", "mult-adds", "blas", "loops", "loops/blas"],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, no torch.compile")
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--no-torch-compile", action="store_true", help="skip torch.compile (it compiles for minutes)")
    parser.add_argument("--no-gelu", action="store_true", help="skip the fusion device's GELU row")
    parser.add_argument("--matmul-threshold", action="store_true", help="time BLAS against generated loops")
    parser.add_argument("--no-wgpu", action="store_true", help="skip the wgpu table (benchmarks/compile_wgpu.py)")
    parser.add_argument(
        "--conv-chains",
        action="store_true",
        help="also time ember.compile without conv chains (LLVMExecutor(conv_chains=False))",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="run ember (EMBER_NUM_THREADS) and torch on N threads, and the whole process (JAX's "
        "pools included) on N cores, for ratios at equal resources (default: ember and torch 1 "
        "thread, JAX its own default on every core)",
    )
    args = parser.parse_args()
    repeats = 5 if args.quick else 11
    threads = 1
    if args.threads is not None:
        threads = max(1, args.threads)
        os.environ["EMBER_NUM_THREADS"] = str(threads)  # read when the flex backend is created
        if hasattr(os, "sched_setaffinity"):  # JAX sizes its pools by the cores it may use
            cores = sorted(os.sched_getaffinity(0))
            os.sched_setaffinity(0, set(cores[:threads]))
    torch = try_import_torch()
    if torch is not None:
        torch.set_num_threads(threads)
    if args.matmul_threshold:
        matmul_threshold(repeats)
        return
    tables: dict[str, list] = {"wall": [], "cpu": [], "ratios": []}
    notes: list[str] = []
    for workload in args.workloads:
        training(torch, workload, repeats, not (args.quick or args.no_torch_compile), tables, notes, args.conv_chains)
    header = ["workload"] + list(NAMES.values())
    print_table("training step, median wall us per step (alternating rounds)", header, tables["wall"])
    print_table("training step, median CPU us per step (this process, all its threads)", header, tables["cpu"])
    print_table("ratios (medians of per-round ratios)", ["workload", "ratio", "wall", "CPU"], tables["ratios"])
    if not args.no_gelu:
        rows: list[list[str]] = []
        gelu_forward(torch, repeats, rows, notes)
        print_table(
            "fusion device, median us per call; ratios are medians of per-round ratios",
            ["workload", "eager", "fused", "torch", "fused/eager", "fused/torch"],
            rows,
        )
    print()
    for note in notes:
        print(note)
    print(blas_line())
    if not args.no_wgpu:
        from benchmarks.compile_wgpu import wgpu_table

        wgpu_table(3 if args.quick else 9, 20)


if __name__ == "__main__":
    main()
