"""Per-step time of a compiled plan (the LLVM executor): where a compiled step spends
its time beside its matrix products.

    python benchmarks/profile_compiled.py            # W4 training step and eval forward
    python benchmarks/profile_compiled.py --steps    # also the 25 slowest steps
    python benchmarks/profile_compiled.py --digits   # the digits example's step instead of W4's
    python benchmarks/profile_compiled.py --lstm     # benchmarks/rnn.py's LSTM step instead of W4's
    python benchmarks/profile_compiled.py --w3       # benchmarks/compile.py's W3 (small CNN) step
    python benchmarks/profile_compiled.py --clock cpu  # CPU time (a loaded machine)

``profile_variant(variant)`` recompiles the variant's schedule with every compiled
step as its own entry, bound to the variant's own arena, pointer table and scalars
(run the plan once first, so that its inputs are bound), and times each entry alone
(median of rounds). The eager calls between segments are not re-run (their last
outputs are kept alive); their time is the rest of the step. Steps are grouped by
kind: ``matmul`` (BLAS or generated loops), a library op by name, ``kernel`` (an
elementwise loop nest) and ``reduce`` (a loop nest with a reduction: norms, softmax,
sums of gradients).
"""

from __future__ import annotations

import collections
import ctypes
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ember.backend.fusion.llvm.codegen import ModuleBuilder, write_tables
from ember.backend.fusion.steps import Call, ConvChain, Library
from ember.backend.kernel.llvm import arrays, jit
from ember.backend.kernel.steps import Kernel, Matmul

_ENTRY = ctypes.CFUNCTYPE(None)


def _clock_of(argv: list[str]) -> Any:
    """``time.process_time`` with ``--clock cpu`` (a loaded machine), else wall time."""
    if "--clock" in argv and argv[argv.index("--clock") + 1 :][:1] == ["cpu"]:
        return time.process_time
    return time.perf_counter


_clock = _clock_of(sys.argv)


def keep_call_outputs(variant: Any) -> list:
    """Makes ``variant`` keep its eager calls' outputs and its inputs' arrays alive
    (their addresses stay in its pointer table, which the per-step entries read; an
    input the caller drops, such as a decode step's token array, would dangle)."""
    kept: list = []
    original = variant._call

    def call(backend, step, values, scalars, keep):
        original(backend, step, values, scalars, keep)
        kept.extend(values[b] for b in step.outs)
        kept.extend(keep)

    variant._call = call
    bind = variant._bind

    def bind_kept(k, a, slot, donated):  # an input's array (or its dense copy), held
        bound = bind(k, a, slot, donated)
        kept.append(bound)
        return bound

    variant._bind = bind_kept
    return kept


def describe(schedule: Any, step: Any) -> tuple[str, str]:
    """A step's kind and a short description."""
    if isinstance(step, Matmul):
        out = schedule.buffers[step.out].shape
        return "matmul", f"matmul {list(step.a[1].shape)} @ {list(step.b[1].shape)} -> {list(out)}"
    if isinstance(step, Library):
        return step.node.op, f"{step.node.op} {[list(schedule.buffers[b].shape) for b in step.outs]}"
    if isinstance(step, ConvChain):
        return "conv chain", "conv chain"
    if isinstance(step, Kernel):
        kind = "reduce" if step.reductions else "kernel"
        ops = sorted({type(s.expr).__name__ for s in step.stores})
        return kind, f"{kind} {list(step.space)} stores {len(step.stores)} {ops[:3]}"
    return "call", f"call {step.node.op}"


def profile_variant(variant: Any, rounds: int = 15, inner: int = 20) -> list[tuple[int, str, str, float]]:
    """``(step index, kind, description, median us)`` per compiled step of ``variant``."""
    sched = variant.schedule
    kept = []
    for buf, shape in variant._fresh_shape.items():  # returned buffers: the caller may have dropped them
        slot = variant._ext.get(buf, -1)
        if slot >= 0:
            kept.append(np.zeros(shape, sched.buffers[buf].dtype))
            variant._ptrs[slot] = arrays.handle(kept[-1])
    compiled = [i for i, s in enumerate(sched.steps) if not isinstance(s, Call)]
    builder = ModuleBuilder(
        sched,
        "ember_prof",
        variant.memory.offsets,
        variant._ext,
        variant.scratch,
        variant.schedule and _blas(),
        arrays.DATA_OFFSET,
        _threshold(),
        variant.memory.aliases,
    )
    names = []
    for i in compiled:
        builder.segment(f"ember_prof_s{i}", [i])
        names.append(f"ember_prof_e{i}")
        builder.entry(names[-1], f"ember_prof_s{i}")
    module = jit.compile_module(builder.build(), names, data=(builder.tables_name,))
    write_tables(
        module.addresses[builder.tables_name],
        variant._arena_addr,
        variant._ptrs_addr,
        variant._scalars_addr,
        variant._status.buffer_info()[0],
    )
    entries = [_ENTRY(module.addresses[n]) for n in names]
    floors = {i: _numpy_product(sched, sched.steps[i]) for i in compiled if isinstance(sched.steps[i], Matmul)}
    samples: dict[int, list[float]] = collections.defaultdict(list)
    floor_samples: dict[int, list[float]] = collections.defaultdict(list)
    for _ in range(rounds):
        for i, fn in zip(compiled, entries):
            start = _clock()
            for _ in range(inner):
                fn()
            samples[i].append((_clock() - start) / inner * 1e6)
            if i in floors:
                start = _clock()
                for _ in range(inner):
                    floors[i]()
                floor_samples[i].append((_clock() - start) / inner * 1e6)
    out = []
    for i in compiled:
        kind, what = describe(sched, sched.steps[i])
        if i in floors:
            what += f" (numpy {statistics.median(floor_samples[i]):.0f} us)"
        out.append((i, kind, what, statistics.median(samples[i])))
    numpy_total = sum(statistics.median(v) for v in floor_samples.values())
    out.append((-1, "numpy matmul (not in the step)", "the same products with numpy", numpy_total))
    return out


def _numpy_product(sched: Any, step: Matmul) -> Any:
    """``np.matmul`` of random operands of ``step``'s shapes and layouts (a transposed
    operand as a transposed view), into a preallocated output: what the product
    costs through numpy's BLAS."""
    from ember.backend.fusion.llvm.support import blas_layout

    rng = np.random.default_rng(0)
    operands = []
    for _, view in (step.a, step.b):
        shape = view.shape
        layout = blas_layout(view)
        if layout is not None and layout[0]:
            dense = rng.standard_normal(shape[:-2] + (shape[-1], shape[-2])).astype(step.dtype)
            operands.append(np.swapaxes(dense, -1, -2))
        else:
            operands.append(rng.standard_normal(shape).astype(step.dtype))
    out = np.empty(sched.buffers[step.out].shape, step.dtype)
    a, b = operands

    def run() -> None:
        np.matmul(a, b, out=out.reshape(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + out.shape[-2:]))

    return run


def _blas() -> Any:
    from ember.backend.flex import blas

    return blas.load()


def _threshold() -> int:
    from ember.backend.fusion.llvm.support import BLAS_THRESHOLD

    return BLAS_THRESHOLD


def report(title: str, profile: list[tuple[int, str, str, float]], total_us: float, top: int) -> None:
    by_kind: dict[str, list[float]] = collections.defaultdict(list)
    for _, kind, _, us in profile:
        by_kind[kind].append(us)
    steps_sum = sum(us for i, *_, us in profile if i >= 0)
    print(f"\n{title}: whole run {total_us:.0f} us, compiled steps alone {steps_sum:.0f} us")
    print(f"  {'kind':<32}{'steps':>6}{'us':>10}{'share':>8}")
    for kind, times in sorted(by_kind.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {kind[:30]:<32}{len(times):>6}{sum(times):>10.0f}{sum(times) / steps_sum:>8.1%}")
    if top:
        print(f"  the {top} slowest steps:")
        for i, _kind, what, us in sorted((p for p in profile if p[0] >= 0), key=lambda p: -p[3])[:top]:
            print(f"    [{i:>3}] {us:8.1f} us  {what}")


def _time(fn: Any, n: int = 50) -> float:
    for _ in range(5):
        fn()
    samples = []
    for _ in range(7):
        start = _clock()
        for _ in range(n):
            fn()
        samples.append((_clock() - start) / n * 1e6)
    return statistics.median(samples)


def digits_steps() -> list[tuple[str, Any, Any]]:
    """``examples/classify_digits.py``'s training step (forward, backward, AdamW) at
    batch 32 and its validation forward at batch 256, compiled: ``(name, run, compiled)``."""
    import importlib.util

    import ember
    from ember import Device, Tensor
    from ember.optim import AdamWConfig, GradientsParams

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "classify_digits.py")
    spec = importlib.util.spec_from_file_location("classify_digits", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    rng = np.random.default_rng(0)
    device = Device.flex().autodiff()
    device.seed(42)
    state = [example.DigitsCnn.new(device)]
    optim = AdamWConfig(weight_decay=1e-4).init()

    def batch(n: int, on: Any) -> tuple[Any, Any]:
        images = Tensor.from_data(rng.random((n, 1, 8, 8)).astype(np.float32), device=on)
        return images, Tensor.from_data(rng.integers(0, 10, n), device=on)

    train_batch, valid_batch = batch(32, device), batch(256, device.inner())

    def update(model: Any, batch: Any, lr: float) -> Any:
        out = model.forward_classification(batch)
        return optim.step(lr, model, GradientsParams.from_grads(out.loss.backward(), model)), out.loss

    update_compiled = ember.compile(update)
    valid_compiled = ember.compile(lambda model, batch: model.forward_classification(batch).loss)

    def step() -> None:
        state[0], loss = update_compiled(state[0], train_batch, 1e-3)
        loss.into_scalar()

    def valid() -> None:
        valid_compiled(state[0].valid(), valid_batch).into_scalar()

    return [("digits step", step, update_compiled), ("digits valid", valid, valid_compiled)]


def w4_steps() -> list[tuple[str, Any, Any]]:
    """W4's training step and eval forward, compiled: ``(name, run, compiled)``."""
    import ember
    from benchmarks.gpt import ember_gpt
    from benchmarks.train_step import compiled_step_fn
    from ember import Device, Tensor
    from ember.nn.loss import CrossEntropyLoss

    batch, block, vocab = 16, 64, 65
    rng = np.random.default_rng(0)
    x_np = rng.integers(0, vocab, (batch, block))
    y_np = rng.integers(0, vocab, (batch, block))
    device = Device.flex().autodiff()
    device.seed(0)
    model = ember_gpt(device, vocab=vocab, block=block)
    x, y = Tensor.from_data(x_np, device=device), Tensor.from_data(y_np, device=device)
    ce = CrossEntropyLoss()

    def w4_loss(p, t):
        return ce.forward(p.reshape([-1, vocab]), t.reshape([-1]))

    step, compiled = compiled_step_fn(model, x, y, w4_loss)
    valid = model.valid()
    x_eval = Tensor.from_data(x_np, device=device.inner())
    forward = ember.compile(lambda m, inputs: m(inputs))

    def eval_() -> None:
        forward(valid, x_eval).to_data()

    return [("W4 step", step, compiled), ("W4 eval", eval_, forward)]


def lstm_steps() -> list[tuple[str, Any, Any]]:
    """``benchmarks/rnn.py``'s LSTM classifier training step, compiled: ``(name, run, compiled)``."""
    from benchmarks import rnn
    from ember import Device, Tensor

    x_np, y_np = rnn.data()
    device = Device.flex().autodiff()
    model = rnn.ember_twin("lstm", device, None)
    x, y = Tensor.from_data(x_np, device=device), Tensor.from_data(y_np, device=device)
    step = rnn.compiled_step_fn(model, x, y)
    step()
    compiled = step.__closure__ and next(
        c.cell_contents for c in step.__closure__ if hasattr(c.cell_contents, "_entries")
    )
    return [("LSTM step", step, compiled)]


def w3_steps() -> list[tuple[str, Any, Any]]:
    """``benchmarks/compile.py``'s W3 training step (small CNN, Adam), compiled."""
    from benchmarks import compile as compile_benchmark

    step = compile_benchmark.ember_step("W3", "compiled")
    step()
    compiled = next(c.cell_contents for c in step.__closure__ if hasattr(c.cell_contents, "_entries"))
    return [("W3 step", step, compiled)]


def main() -> None:
    top = 25 if "--steps" in sys.argv else 0
    if "--lstm" in sys.argv:
        runs = lstm_steps()
    elif "--w3" in sys.argv:
        runs = w3_steps()
    else:
        runs = digits_steps() if "--digits" in sys.argv else w4_steps()
    for name, fn, fn_compiled in runs:
        for _ in range(3):
            fn()
        plan = next(iter(fn_compiled._entries.values())).plan
        variants = getattr(plan, "variants", None)
        if not variants:
            print(f"\n{name}: not planned by the LLVM executor ({type(plan).__name__})")
            continue
        variant = variants[-1]
        kept = keep_call_outputs(variant)
        total = _time(fn)
        report(name, profile_variant(variant), total, top)
        del kept


if __name__ == "__main__":
    main()
