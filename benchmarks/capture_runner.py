"""The steady-state runner of ``ember.compile``: generated Python against a list of
bound steps, on the W1 training step (MLP 4-16-1, MSE, Adam, 64 samples).

    OPENBLAS_NUM_THREADS=1 python benchmarks/capture_runner.py --rounds 7

``ember/capture/runner.py`` writes one straight-line function per traced entry (read
the inputs, run the plan, store the outputs). The alternative it must beat is the same
work as a list of bound steps built from the entry's typed sources and writes: a
closure per input read and per store, run in loops. Both run the same plan on the same
binding; the table gives the median CPU us per compiled step over alternating rounds,
and the per-call Python around the plan (the step minus the plan's own run, timed
alone on the same inputs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.compile import LR, ember_parts
from ember.backend.fusion import scalars as scalar_module
from ember.capture import compile as ember_compile
from ember.capture.entry import Entry
from ember.capture.leaves import tensor_on
from ember.capture.pytree import unflatten
from ember.capture.sources import RETRACE, Argument, StateNumber
from ember.capture.writes import ModuleResult, NumberField, StaticField, TensorField, TensorResult
from ember.device import Device
from ember.optim import AdamConfig, GradientsParams


def bound_runner(entry: Entry) -> Callable[[list[Any]], Any]:
    """The steady state of ``entry`` as bound steps (the cases W1 takes: the module
    argument is the returned module, its parameters and the moments held by the
    plan's binding, number fields of owned states written back)."""
    assert entry.binding is not None and entry.model_out is not None and not entry.draws
    model, owned, generic, dict_get = entry.model_out, entry.owned, entry.run_generic, dict.get
    checks = [(read.owner, read.key, k) for k, read in enumerate(entry.state_reads)]
    held = {i for _, i in entry.plan.donated(entry.donated)}
    readers: list[Callable[[list[Any]], Any]] = []
    for n, source in enumerate(entry.tensor_sources):
        if n in held:
            continue
        assert type(source) is Argument
        readers.append(lambda leaves, i=source.position: leaves[i]._primitive.inner)
    scalar_readers: list[Callable[[list[Any]], Any]] = []
    for source in entry.sources:
        if source.scalar:
            assert type(source) is StateNumber
            scalar_readers.append(
                lambda leaves, o=source.owner, k=source.key, f=source.field: getattr(dict_get(o, k), f)
            )
    stores: list[Callable[[Any, list[Any]], None]] = []
    for write in entry.state_writes:
        for field in write.fields:
            if type(field) is NumberField:
                stores.append(
                    lambda outputs, scalars, o=write.owner, k=write.key, f=field: setattr(
                        dict_get(o, k), f.name, f.kind(scalars[f.slot])
                    )
                )
            else:  # a tensor held by the binding (updated in place), or a static field unchanged
                assert type(field) in (TensorField, StaticField)
    positions = {k: n for n, k in enumerate(k for k in range(len(entry.graph.outputs)) if k not in held)}
    results: list[Callable[[Any, list[Any]], Any]] = []
    for result in entry.results:
        if type(result) is ModuleResult:
            results.append(lambda outputs, scalars: model)
        else:
            assert type(result) is TensorResult
            results.append(
                lambda outputs, scalars, k=positions[result.output], d=result.device: tensor_on(outputs[k], d)
            )
    program, backend, spec = entry.scalar_program, entry.backend, entry.result_spec

    def run(leaves: list[Any]) -> Any:
        if leaves[0] is not model:
            return generic(leaves)
        for owner, key, k in checks:
            if dict_get(owner, key) is not owned[k]:
                return generic(leaves)
        binding = entry.binding
        scalars = program([read(leaves) for read in scalar_readers])
        if scalars is None:
            return RETRACE
        outputs = binding.run(backend, [read(leaves) for read in readers], scalars)
        for store in stores:
            store(outputs, scalars)
        return unflatten(spec, [result(outputs, scalars) for result in results])

    return run


def bound_scalar_program(program: Any, wanted: list[int]) -> Callable[[list[Any]], Any]:
    """``program.compile(wanted)`` as bound steps: one closure per needed entry, run
    in a loop (guards checked as each value is computed)."""
    needed = set(wanted) | {entry for entry, _ in program.guards}
    for i in range(len(program.entries) - 1, -1, -1):
        op, operands = program.entries[i]
        if i in needed and op != "input":
            needed.update(value for kind, value in operands if kind == "$")
    fns = {**scalar_module._BINARY, **scalar_module._UNARY, **scalar_module._COMPARE}
    guards = dict(program.guards)
    steps: list[tuple[int, Callable[[dict, list[Any]], Any], Any]] = []
    for i, (op, operands) in enumerate(program.entries):
        if i not in needed:
            continue
        if op == "input":
            step: Callable[[dict, list[Any]], Any] = lambda v, inputs, n=operands[0]: inputs[n]  # noqa: E731
        else:
            getters = [(lambda v, a=value: v[a]) if kind == "$" else (lambda v, k=value: k) for kind, value in operands]
            if len(getters) == 2:
                step = lambda v, inputs, f=fns[op], a=getters[0], b=getters[1]: f(a(v), b(v))  # noqa: E731
            else:
                step = lambda v, inputs, f=fns[op], a=getters[0]: f(a(v))  # noqa: E731
        steps.append((i, step, guards.get(i)))

    def run(inputs: list[Any]) -> Any:
        values: dict[int, Any] = {}
        for i, step, guard in steps:
            value = values[i] = step(values, inputs)
            if guard is not None and bool(value) != guard:
                return None
        return [values[w] for w in wanted]

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    model, x, y, loss_fn = ember_parts("W1", Device.flex().autodiff())
    optim = AdamConfig().init()

    def train_step(model, x, y):
        loss = loss_fn(model(x), y)
        return optim.step(LR, model, GradientsParams.from_grads(loss.backward(), model)), loss

    programs: list[tuple[Any, list[int], Any]] = []  # (program, wanted, its generated function)
    compile_program = scalar_module.ScalarProgram.compile

    def recording(program: Any, wanted: list[int], pack: Any = None) -> Any:
        fn = compile_program(program, wanted, pack)
        programs.append((program, list(wanted), fn))
        return fn

    scalar_module.ScalarProgram.compile = recording  # type: ignore[method-assign]
    step = ember_compile(train_step)
    for _ in range(10):
        model, loss = step(model, x, y)
    scalar_module.ScalarProgram.compile = compile_program  # type: ignore[method-assign]
    (entry,) = [e for e in step._entries.values() if e.binding is not None]
    generated = entry._runner
    bound = bound_runner(entry)
    binding = entry.binding
    free = [x._primitive.inner, y._primitive.inner]
    scalars = entry.scalar_program([s.read([model, x, y], {}) for s in entry.sources if s.scalar])
    plan_alone = lambda: binding.run(entry.backend, free, scalars)  # noqa: E731
    runners = {"generated": generated, "bound steps": bound}
    for runner in runners.values():  # both run, and give the returned module back
        entry._runner = runner
        model, loss = step(model, x, y)
        assert model is entry.model_out and loss.dims() in ([], [1])

    def per_step(fn: Callable[[], Any]) -> float:
        start = time.process_time()
        for _ in range(args.steps):
            fn()
        return (time.process_time() - start) / args.steps * 1e6

    def compiled_call() -> None:
        nonlocal model
        model, _ = step(model, x, y)

    times: dict[str, list[float]] = {name: [] for name in [*runners, "plan alone"]}
    for _ in range(args.rounds):
        for name, runner in runners.items():
            entry._runner = runner
            times[name].append(per_step(compiled_call))
        times["plan alone"].append(per_step(plan_alone))
    plan_us = statistics.median(times["plan alone"])
    print(f"W1 compiled step, median CPU us per call over {args.rounds} rounds of {args.steps} steps")
    print(f"{'runner':<12}  {'step':>6}  {'Python':>6}")
    for name in runners:
        us = statistics.median(times[name])
        print(f"{name:<12}  {us:6.2f}  {us - plan_us:6.2f}")
    print(f"{'plan alone':<12}  {plan_us:6.2f}")
    # The scalar program alone (ember/backend/fusion/scalars.py): generated against bound steps.
    program, wanted, generated_program = next(p for p in programs if p[2] is entry.scalar_program)
    bound_program = bound_scalar_program(program, wanted)
    numbers = [s.read([model, x, y], {}) for s in entry.sources if s.scalar]
    assert bound_program(numbers) == generated_program(numbers)
    program_times: dict[str, list[float]] = {"generated": [], "bound steps": []}
    for _ in range(args.rounds):
        program_times["generated"].append(per_step(lambda: generated_program(numbers)) * 1e3)
        program_times["bound steps"].append(per_step(lambda: bound_program(numbers)) * 1e3)
    needed = sum(1 for line in program.source.splitlines() if " = " in line)
    print(f"W1 Adam scalar program ({needed} entries), median CPU ns per call")
    for name, found in program_times.items():
        print(f"{name:<12}  {statistics.median(found):8.0f}")


if __name__ == "__main__":
    main()
