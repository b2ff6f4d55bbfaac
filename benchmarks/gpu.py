"""The cube (wgpu) backend's generated kernels against plain hand-written WGSL kernels of
the same geometry, and against the kernels of another ember checkout ("today").

    python benchmarks/gpu.py [--quick] [--baseline DIR] [--only matmul,elementwise,...]
    python benchmarks/gpu.py --cuda [--quick]   # the cuda backend's rows (benchmarks/gpu_cuda.py)

Each workload's launches are captured once from the backend and then replayed (no
Python per op), so every candidate is timed the same way: ``reps`` replays, then a
sync. Candidates run in alternating rounds (drifting machine load hits all alike);
figures are medians over rounds, ratios the median of per-round ratios.

Candidates per workload:

* ``ember``: the current generator (``--variants``: also each matmul template forced,
  whatever the shape); ``today``: the kernels of the checkout given with
  ``--baseline`` (e.g. ``git worktree add /tmp/base main``), captured in a child process
  and compiled here;
* ``naive``, ``tiled 4x4`` (64x64x16 tile), ``tiled 8x4`` (128x64x16 tile): the
  hand-written matmuls of :mod:`benchmarks.gpu_refs`, on row-major copies of the operands;
  ``vec4 add``: the hand-written elementwise add;
* ``numpy`` (reductions) on this process's CPU, and ``torch`` when it has a GPU.

Sections: ``matmul`` (GFLOP/s), ``elementwise`` and ``reduce`` (GB/s an ideal kernel
moves), ``conv`` (GFLOP/s of the whole op), ``overheads``, ``step`` (the seed program).
``--json PATH`` also writes every median. On lavapipe (Mesa's CPU Vulkan driver) these
figures are proxies for a GPU, and they share the CPU with everything else running.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import gpu_cases as cases
from benchmarks import gpu_refs as refs
from benchmarks.common import fmt, median_us, print_table, try_import_torch
from ember import Device, DeviceKind, Distribution, Module, Tensor
from ember.backend.cube.cache import Kernel
from ember.nn import Linear, LinearConfig, Relu
from ember.nn.loss import MseLoss, Reduction
from ember.optim import AdamConfig, GradientsParams

SECTIONS = ("matmul", "elementwise", "reduce", "conv", "overheads", "step")


def matmul_cases(quick: bool, large: bool) -> list[dict]:
    mm = cases.matmul_case
    out = [mm("512^3", 512, 512, 512)]
    if not quick:
        out += [mm("768^3", 768, 768, 768), mm("1024^3", 1024, 1024, 1024)]
    out += [
        mm("W2 x@W 128x784x256", 128, 784, 256),
        mm("W2 g@W^T 128x256x784", 128, 256, 784, tb=True),
        mm("W2 x^T@g 784x128x256", 784, 128, 256, ta=True),
        mm("W2 h@W 128x256x10", 128, 256, 10),
        mm("CNN conv1 16x9x784 b64", 16, 9, 784, batch_a=(1, 1), batch_b=(64, 1)),
        mm("CNN conv2 32x144x196 b64", 32, 144, 196, batch_a=(1, 1), batch_b=(64, 1)),
    ]
    if large:
        out.append(mm("4096^3", 4096, 4096, 4096))
    return out


def other_cases(quick: bool) -> dict[str, list[dict]]:
    sizes = [2**20] if quick else [2**20, 2**24]
    return {
        "elementwise": [{"kind": "add", "name": f"add {n:,}", "n": n} for n in sizes]
        + [{"kind": "fused", "name": f"exp(x)*y {sizes[-1]:,}", "n": sizes[-1]}],
        "reduce": [
            {"kind": "sum_rows", "name": "sum rows 4096x1024", "shape": [4096, 1024]},
            {"kind": "softmax", "name": "softmax 4096x1024", "shape": [4096, 1024]},
            {"kind": "log_softmax", "name": "log_softmax 128x10", "shape": [128, 10]},
        ],
        "conv": [
            {"kind": "conv", "name": "conv1 64x1x28x28 * 16x1x3x3", "x": [64, 1, 28, 28], "w": [16, 1, 3, 3]},
            {"kind": "conv", "name": "conv2 64x16x14x14 * 32x16x3x3", "x": [64, 16, 14, 14], "w": [32, 16, 3, 3]},
        ],
    }


# ---------------------------------------------------------------------- replays
class Replay:
    """A list of launches that can be recorded again and again on one runtime."""

    def __init__(self, runtime, launches, keep) -> None:
        self.runtime = runtime
        self.launches = launches
        self.keep = keep

    def __call__(self) -> None:
        launch = self.runtime.launch3
        for kernel, blocks, info, groups in self.launches:
            launch(kernel, blocks, info, groups)


def ember_replay(backend, case) -> tuple[Replay, float]:
    """The current generator's launches for ``case``, and the result's relative error."""
    launches, buffers, result, keep = cases.capture(backend, case)
    got = backend.to_numpy(result).astype(np.float64)
    want = cases.reference(case, cases.inputs(case))
    error = float(np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want)))))
    blocks = [b for b, _, _ in buffers]
    return Replay(
        backend.runtime, [(k, [blocks[i] for i in ids], info, g) for k, ids, info, g in launches], keep
    ), error


def ember_forced(backend, case, plan) -> Replay:
    """The current generator's launches for a matmul case with its template forced."""
    from ember.backend.cube.kernels import matmul

    choose = matmul.choose
    matmul.choose = lambda *args, **kwargs: plan
    try:
        return ember_replay(backend, case)[0]
    finally:
        matmul.choose = choose


def variants(case) -> dict:
    """Each matmul template forced (``--variants``): data for the thresholds of ``choose``."""
    from ember.backend.cube.kernels import matmul

    return {
        "ember 8x4 tile": matmul.LARGE,
        "ember 4x4 tile": matmul.MEDIUM,
        "ember registers": matmul.registers(case["m"], case["n"]),
    }


def baseline_replays(runtime, baseline: str, todo: list[dict]) -> dict[str, tuple[Replay, float]]:
    """The baseline checkout's launches for each case, compiled on ``runtime``."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(baseline))
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_cases.py")
    proc = subprocess.run(
        [sys.executable, script],
        input=json.dumps(todo),
        env=env,
        cwd=baseline,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"the baseline capture failed:\n{proc.stderr[-4000:]}")
    out = {}
    compiled: dict[str, Kernel] = {}
    for entry, case in zip(json.loads(proc.stdout), todo):
        arrays = cases.inputs(case)
        blocks = []
        for buf in entry["buffers"]:
            if buf["input"] is not None:
                blocks.append(runtime.upload(np.ascontiguousarray(arrays[buf["input"]])))
            else:
                blocks.append(runtime.alloc(buf["size"]))
        launches = []
        for ln in entry["launches"]:
            kernel = compiled.get(ln["source"])
            if kernel is None:
                pipeline = runtime.compile("today_" + ln["name"], ln["source"], ln["n_in"], ln["n_out"])
                kernel = compiled[ln["source"]] = Kernel(ln["name"], pipeline, ln["n_in"], ln["n_out"], ln["source"])
            launches.append((kernel, [blocks[i] for i in ln["buffers"]], ln["info"], tuple(ln["groups"])))
        out[case["name"]] = (Replay(runtime, launches, blocks), entry["error"])
    return out


def _kernel(runtime, name: str, source: str) -> Kernel:
    return Kernel(name, runtime.compile(name, source, 2, 1), 2, 1, source)


def reference_matmuls(runtime, case) -> dict[str, Replay]:
    """The hand-written matmuls on row-major copies of the case's operands."""
    a, b = cases.inputs(case)
    if case["ta"]:
        a = np.swapaxes(a, -1, -2)
    if case["tb"]:
        b = np.swapaxes(b, -1, -2)
    m, k, n = case["m"], case["k"], case["n"]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    count = int(np.prod(batch)) if batch else 1
    a_step = 0 if int(np.prod(a.shape[:-2])) == 1 else m * k
    b_step = 0 if int(np.prod(b.shape[:-2])) == 1 else k * n
    ga = runtime.upload(np.ascontiguousarray(a, np.float32))
    gb = runtime.upload(np.ascontiguousarray(b, np.float32))
    out = runtime.alloc(4 * count * m * n)
    info = [m, n, k, a_step, b_step]
    keep = (ga, gb, out)
    kernels = {
        "naive": (refs.NAIVE, (-(-n // 16), -(-m // 16), count)),
        "tiled 4x4": (refs.TILED_4X4, (-(-n // 64), -(-m // 64), count)),
        "tiled 8x4": (refs.TILED_8X4, (-(-n // 64), -(-m // 128), count)),
    }
    return {
        name: Replay(runtime, [(_kernel(runtime, "ref_" + name, src), [ga, gb, out], info, grid)], keep)
        for name, (src, grid) in kernels.items()
    }


def reference_add(runtime, case) -> dict[str, Replay]:
    a, b = cases.inputs(case)
    ga, gb = runtime.upload(a), runtime.upload(b)
    out = runtime.alloc(a.nbytes)
    quads = a.size // 4
    groups = -(-quads // 256)
    grid = (groups, 1, 1)
    if groups > runtime.max_groups:
        rows = -(-groups // runtime.max_groups)
        grid = (-(-groups // rows), rows, 1)
    kernel = _kernel(runtime, "ref_add_vec4", refs.ADD_VEC4)
    return {"vec4 add": Replay(runtime, [(kernel, [ga, gb, out], [quads], grid)], (ga, gb, out))}


# ---------------------------------------------------------------------- timing
def alternate(candidates: dict, sync, rounds: int, min_time: float) -> dict[str, list[float]]:
    """Seconds per call of each candidate, one sample per round, candidates alternating."""
    reps = {}
    for name, fn in candidates.items():
        fn()
        sync()
        number = 1
        while True:
            start = time.perf_counter()
            for _ in range(number):
                fn()
            sync()
            if time.perf_counter() - start >= min_time or number >= 1 << 12:
                break
            number *= 2
        reps[name] = number
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            start = time.perf_counter()
            for _ in range(reps[name]):
                fn()
            sync()
            samples[name].append((time.perf_counter() - start) / reps[name])
    return samples


def report(
    title: str,
    unit: str,
    work: dict[str, float],
    results: dict[str, dict[str, list[float]]],
    errors: dict[str, float],
    record: dict,
) -> None:
    """One table: per case and candidate, the median rate and the ratio to ember."""
    rows = []
    for case_name, samples in results.items():
        ember = samples["ember"]
        for name, times in samples.items():
            rate = work[case_name] / statistics.median(times) / 1e9
            ratio = statistics.median(o / e for o, e in zip(times, ember))
            spread = (max(times) - min(times)) / statistics.median(times)
            label = case_name if name == "ember" else ""
            note = f"err {errors[case_name]:.1e}" if name == "ember" else ""
            rows.append([label, name, fmt(rate), f"{ratio:.2f}x", f"{spread:.0%}", note])
            record.setdefault(title, {}).setdefault(case_name, {})[name] = {
                "median_s": statistics.median(times),
                unit: rate,
                "time_vs_ember": ratio,
            }
    print_table(
        f"{title}: {unit} (higher is better); 'time/ember' > 1 means ember is faster",
        ["case", "kernel", unit, "time/ember", "spread", ""],
        rows,
    )


def run_section(section, todo, backend, args, record, torch) -> None:
    runtime = backend.runtime
    baseline = baseline_replays(runtime, args.baseline, todo) if args.baseline else {}
    results, work, errors = {}, {}, {}
    for case in todo:
        ember, error = ember_replay(backend, case)
        candidates = {"ember": ember}
        if case["name"] in baseline:
            candidates["today"] = baseline[case["name"]][0]
        if case["kind"] == "matmul":
            if args.variants:
                candidates.update({name: ember_forced(backend, case, plan) for name, plan in variants(case).items()})
            candidates.update(reference_matmuls(runtime, case))
        if case["kind"] == "add":
            candidates.update(reference_add(runtime, case))
        if case["kind"] in ("sum_rows", "softmax", "log_softmax"):
            x = cases.inputs(case)[0]
            candidates["numpy"] = numpy_op(case["kind"], x)
        if torch is not None and torch.cuda.is_available() and case["kind"] == "matmul" and not case["batch_b"]:
            candidates["torch-cuda"] = torch_matmul(torch, case)
        results[case["name"]] = alternate(candidates, runtime.sync, args.rounds, args.min_time)
        errors[case["name"]] = error
        work[case["name"]] = cases.flops(case) or cases.moved_bytes(case)
        del candidates
    unit = "GFLOP/s" if section in ("matmul", "conv") else "GB/s"
    report(section, unit, work, results, errors, record)


def numpy_op(kind: str, x: np.ndarray):
    if kind == "sum_rows":
        return lambda: x.sum(axis=1, keepdims=True)

    def softmax():
        z = x - x.max(axis=1, keepdims=True)
        e = np.exp(z)
        if kind == "log_softmax":
            return z - np.log(e.sum(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return softmax


def torch_matmul(torch, case):
    a, b = (torch.from_numpy(x).cuda() for x in cases.inputs(case))
    if case["ta"]:
        a = a.transpose(-1, -2)
    if case["tb"]:
        b = b.transpose(-1, -2)
    torch.backends.cuda.matmul.allow_tf32 = False

    def run():
        a @ b
        torch.cuda.synchronize()

    return run


# ---------------------------------------------------------------------- overheads, seed step
def timed(fn, sync, reps: int, repeats: int) -> float:
    def run():
        for _ in range(reps):
            fn()
        sync()

    return median_us(run, repeats=repeats, min_time=0.0) / reps / 1e6


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


def bench_seed_step(gpu, steps, repeats):
    device = gpu.autodiff()
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
    before = inner.stats()["launches"]
    for _ in range(steps):
        step()
    launches = (inner.stats()["launches"] - before) / steps
    t = timed(step, device.sync, steps, repeats)
    print_table(
        "the seed program on cube: one training step (median)",
        ["time/step", "kernels/step"],
        [[fmt(t * 1e3, " ms"), f"{launches:.0f}"]],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer shapes, rounds and shorter samples")
    parser.add_argument("--large", action="store_true", help="add a 4096^3 matmul (for a real GPU)")
    parser.add_argument("--baseline", help="another ember checkout to compare against ('today')")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {SECTIONS}")
    parser.add_argument("--variants", action="store_true", help="also time each matmul template forced")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--min-time", type=float, default=None, help="seconds per sample, at least")
    parser.add_argument("--json", help="also write the medians to this file")
    parser.add_argument("--kind", default="default", choices=[k.name.lower() for k in DeviceKind])
    parser.add_argument("--cuda", action="store_true", help="the cuda rows against torch cuda (needs an NVIDIA GPU)")
    args = parser.parse_args()
    if args.cuda:
        from benchmarks.gpu_cuda import run

        run(args.quick)
        return
    args.rounds = args.rounds or (3 if args.quick else 7)
    args.min_time = args.min_time if args.min_time is not None else (0.05 if args.quick else 0.2)
    only = [s for s in args.only.split(",") if s]
    unknown = sorted(set(only) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections {unknown}; choose from {SECTIONS}")
    gpu = Device.wgpu(DeviceKind[args.kind.upper()])
    backend = gpu.backend
    runtime = backend.ensure_ready()
    torch = try_import_torch()
    print(
        f"cube: {gpu!r} on {runtime.name}; subgroups {'yes' if runtime.subgroups else 'no'}; "
        f"{args.rounds} alternating rounds, samples of >= {args.min_time} s"
        + (f"; today = {args.baseline}" if args.baseline else "")
    )
    if hasattr(os, "getloadavg"):
        print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    record: dict = {"adapter": runtime.name, "rounds": args.rounds}
    others = other_cases(args.quick)
    for section in only:
        if section == "matmul":
            run_section(section, matmul_cases(args.quick, args.large), backend, args, record, torch)
        elif section in others:
            run_section(section, others[section], backend, args, record, torch)
        elif section == "overheads":
            bench_overheads(gpu, args.rounds)
        elif section == "step":
            bench_seed_step(gpu, 10 if args.quick else 30, args.rounds)
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(record, f, indent=1)
        os.replace(tmp, args.json)


if __name__ == "__main__":
    main()
