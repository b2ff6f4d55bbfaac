"""The WGSL executor: plans that run a graph as fused cube launches.

``CubeExecutor().plan(graph)`` takes a graph whose run-time scalars are
:class:`~ember.backend.fusion.graph.Sc` placeholders. On its first run a plan makes
a *variant*: it expands the graph's composites for the scalars given
(:mod:`~ember.backend.fusion.primitive_graph`), groups it into kernels
(:mod:`~ember.backend.fusion.scheduler`) and turns the steps into cube launches
(:mod:`.launches`). ``plan.run(cube, inputs, scalars)`` computes the variant's
scalars from the run's (a decomposition's truth test on one is a guard: other
answers make another variant) and makes the launches in order; the nodes left to
the cube backend run between them, as replay runs them.

A plan's later runs replay a :class:`~.tape.Tape` of its launches when one could be
recorded (see :mod:`.tape`): the same dispatches with bind groups built once and
the run-time scalars written into their parameter words, no Python per launch.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ember.backend.cube.buffer import CubeTensor
from ember.backend.fusion.graph import Graph
from ember.backend.fusion.plan import Executor, Plan
from ember.backend.fusion.primitive_graph import expand
from ember.backend.fusion.replay import PartialRun
from ember.backend.fusion.scheduler import Call, schedule
from ember.backend.fusion.wgsl.launches import Eager, lower, symbols, view
from ember.backend.fusion.wgsl.support import CubeTarget
from ember.backend.fusion.wgsl.tape import Recording, Tape


class CubeExecutor(Executor):
    """Compiles fusion graphs into cube launches. Plans are cached by structure.

    ``tape``: whether plans record their launches and replay them (on by default;
    ``False`` makes every run go through the launches' Python, for comparisons)."""

    name = "wgsl"

    def __init__(self, tape: bool = True) -> None:
        super().__init__()
        self.plan_class = CubePlan
        self.target = CubeTarget()
        self.tape = tape
        #: ``plans`` (variants) made and their ``compile_s``; ``tapes`` recorded, ``untaped``
        #: recordings that gave none (a read-back inside), tape ``replays``, and
        #: ``tape_fallbacks`` (runs whose inputs did not fit their tape)
        self.stats.update({"tapes": 0, "untaped": 0, "replays": 0, "tape_fallbacks": 0})

    def plan(self, graph: Graph, fixed_scalars: dict[int, Any] | None = None) -> CubePlan:
        plan = super().plan(graph, fixed_scalars)
        assert isinstance(plan, CubePlan)
        return plan


class CubePlan(Plan):
    """A graph structure for the cube backend: its variants, one per answer to the
    truth tests its decompositions make on run-time scalars (usually one). It takes
    no donations: outputs never overwrite inputs (a replayed tape alternates its own
    buffers instead, see :mod:`.tape`)."""

    target = "WGSL"
    executor: CubeExecutor

    def lower(self, backend: Any, scalars: Sequence[Any], donated: tuple) -> Variant:
        return Variant(self.graph, self.all_scalars(scalars), self.executor, backend)

    def run_variant(self, variant: Any, backend: Any, inputs: list[Any], scalars: Sequence[Any]) -> list[Any] | None:
        values = variant.scalars(self.all_scalars(scalars))
        return None if values is None else variant.run(backend, inputs, values)

    @property
    def launches(self) -> list[Any]:
        return [launch for launch, _ in self.variants[-1].launches]

    @property
    def tape(self) -> Any:
        return self.variants[-1].tape


class Variant:
    """One lowered expansion of a plan's graph (see the module docstring)."""

    offered: tuple = ()  # no donations (see CubePlan)
    donated: tuple = ()

    def __init__(self, graph: Graph, scalars: list[Any], executor: CubeExecutor, backend: Any):
        start = time.perf_counter()
        self.executor = executor
        target = executor.target
        self.expanded = expand(graph, list(scalars), target.expands)
        sched = self.schedule = schedule(self.expanded, target)
        # Run-time scalars: the kernels' slots, then those the eager calls take.
        wanted = [sym.index for sym in sched.scalars]
        positions: dict[int, int] = {}
        for step in sched.steps:
            if isinstance(step, Call):
                for sym in symbols((step.node.args, step.node.kwargs)):
                    if id(sym) not in positions:
                        positions[id(sym)] = len(wanted)
                        wanted.append(sym.index)
        self.scalars = self.expanded.program.compile(wanted)
        self.launches = lower(sched, backend.runtime.max_storage_buffers, positions)
        buffers = sched.buffers
        graph_inputs = {v: k for k, v in enumerate(self.expanded.graph.inputs)}
        self._inputs = [(b.id, graph_inputs[b.value]) for b in buffers if b.kind == "input"]
        consts = self.expanded.graph.consts
        self._consts = [(b.id, _const(backend, consts[b.value])) for b in buffers if b.kind == "const"]
        self._n_buffers = len(buffers)
        self._outputs = list(sched.outputs)
        self._source_outputs = list(graph.outputs)
        # After which launch each buffer exists, and which buffers each launch reads last.
        step_launch = {s: i for i, (_, steps) in enumerate(self.launches) for s in steps}
        self._made_by = {buf: step_launch[s] for buf, s in sched.producer.items()}
        kept = {buf for buf, _ in sched.outputs}
        last: dict[int, int] = {}
        for i, (_, steps) in enumerate(self.launches):
            for s in steps:
                for buf in sched.steps[s].reads():
                    last[buf] = i
        self._frees: list[list[int]] = [[] for _ in self.launches]
        for buf, i in last.items():
            if buf not in kept and buffers[buf].kind not in ("input", "const"):
                self._frees[i].append(buf)
        self.eager = any(isinstance(launch, Eager) for launch, _ in self.launches)
        self.tape: Any = None
        self.runs = 0
        self.compile_s = time.perf_counter() - start

    # ------------------------------------------------------------------ running
    def run(self, backend: Any, inputs: list[Any], scalars: list[Any]) -> list[Any]:
        """The outputs for ``inputs`` and this variant's ``scalars``: the tape's replay
        when there is one and these inputs fit it, else the launches one by one (the
        second run records the tape)."""
        tape = self.tape
        if tape:
            try:
                out = tape.replay(backend, inputs, scalars)
            except Exception as error:  # nothing of it was computed
                raise PartialRun(error, {}) from error
            if out is not None:
                self.executor.count("replays")
                return out
            self.executor.count("tape_fallbacks")
        elif tape is None and self.runs == 1 and self.executor.tape and backend.runtime.tapes:
            return self._record(backend, inputs, scalars)
        return self._run(backend, inputs, scalars)

    def _run(
        self, backend: Any, inputs: list[Any], scalars: list[Any], recording: Any = None, capture: Any = None
    ) -> list[Any]:
        values: list[Any] = [None] * self._n_buffers
        for buf, k in self._inputs:
            values[buf] = inputs[k]
        for buf, value in self._consts:
            values[buf] = value
        done = 0
        try:
            for (launch, _), frees in zip(self.launches, self._frees):
                if recording is None:
                    launch.run(backend, values, scalars)
                else:
                    self._run_recorded(backend, launch, values, scalars, recording, capture)
                for buf in frees:
                    values[buf] = None
                done += 1
        except Exception as error:
            raise PartialRun(error, self._computed(backend, values, done)) from error
        self.runs += 1
        return [view(backend, values, buf, v) for buf, v in self._outputs]

    def _record(self, backend: Any, inputs: list[Any], scalars: list[Any]) -> list[Any]:
        """A run whose launches are captured into a :class:`~.tape.Tape`."""
        runtime = backend.runtime
        recording = Recording()
        with runtime.capture() as capture:
            outs = self._run(backend, inputs, scalars, recording, capture)
        consts = [value for _, value in self._consts]
        self.tape = Tape.build(runtime, capture, recording, inputs, consts, outs, scalars, self.eager) or False
        self.executor.count("tapes" if self.tape else "untaped")
        return outs

    @staticmethod
    def _run_recorded(
        backend: Any, launch: Any, values: list[Any], scalars: list[Any], recording: Any, capture: Any
    ) -> None:
        """Runs ``launch`` and notes where its scalars went in the captured launches."""
        start = len(capture.launches)
        dynamic = isinstance(launch, Eager) and launch.dynamic
        if dynamic:
            snapshot = {buf: values[buf] for buf in launch.reads}
        launch.run(backend, values, scalars)
        end = len(capture.launches)
        if dynamic:
            recording.dynamic.append((start, end, launch, snapshot))
            return
        wanted = launch.scalars
        for j in range(start, end):
            base = len(capture.launches[j][2]) - 2 * len(wanted)
            for k, (slot, ctype) in enumerate(wanted):
                recording.patches.append((j, base + 2 * k, slot, ctype))

    def _computed(self, backend: Any, values: list[Any], done: int) -> dict[int, Any]:
        """The outputs whose values exist after ``done`` launches."""
        out = {}
        for ref, (buf, v) in zip(self._source_outputs, self._outputs):
            made = self._made_by.get(buf, -1)
            if values[buf] is not None and made < done:
                out[ref] = view(backend, values, buf, v)
        return out


def _const(backend: Any, value: Any) -> CubeTensor:
    if isinstance(value, CubeTensor):
        return value
    import numpy as np

    return backend.from_numpy(np.asarray(value))
