"""One trace of a compiled function (for one guard key) and its replays.

An :class:`Entry` holds the planned graph, where each input comes from (typed
:mod:`~ember.capture.sources`) and where each output goes (typed
:mod:`~ember.capture.writes`). A replay reads the inputs, runs the plan and stores the
outputs: the first runs take the generic path below, which checks everything; then the
steady state runs a specialized runner (:mod:`ember.capture.runner`) that assumes the
structure the last run left and falls back to the generic path when it does not hold.
"""

from __future__ import annotations

import dataclasses
import inspect
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ember.backend.fusion.executors import ReplayExecutor
from ember.backend.fusion.replay import PartialRun, Replay
from ember.backend.fusion.scalars import GraphBreak, SymScalar
from ember.capture.arrays import given
from ember.capture.leaves import innermost, module_key, module_leaves, tensor_on
from ember.capture.pytree import Leaf, unflatten
from ember.capture.runner import build_runner
from ember.capture.sources import RETRACE, Argument, Modules, Parameter, RandomDraw, Running, Source
from ember.capture.trace import Trace, state_template
from ember.capture.writes import (
    Field,
    ModuleResult,
    NumberField,
    Result,
    RunningWrite,
    ScalarResult,
    StateWrite,
    StaticField,
    TensorField,
    TensorResult,
    ValueResult,
)
from ember.module import Module, Param, RunningState
from ember.tensor import Tensor

#: A state object no state is (see :meth:`Entry.own_states`).
NOT_OWNED: Any = object()


def _takes(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn`` accepts the keyword argument ``name``."""
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def accepts_donations(plan: Any) -> bool:
    """Whether ``plan`` may write outputs into donated inputs (a fusion plan whose
    target says so, ``Plan.accepts_donations``; a custom executor's plan does not)."""
    return getattr(plan, "accepts_donations", False) is True


class Entry:
    """A traced function for one guard key: the plan, where its inputs come from, and
    how its outputs go back into tensors, modules and optimizer states."""

    def __init__(
        self,
        executor: Any,
        donate: frozenset[int],
        trace: Trace,
        spec: Any,
        result_spec: Any,
        result_leaves: list[Any],
        backend: Any,
        leaves: list[Any],
        fusion: Any = None,
        defer_plan: bool = True,
    ) -> None:
        self.backend = backend
        # On a fusion device (``fusion``, its FusionBackend) the plan runs on the backend
        # under it: inputs are read as ready values, outputs wrapped as lazy tensors.
        self.fusion = fusion
        self.ready: Callable[[Any], Any] | None = None if fusion is None else fusion._ready
        self.wrap: Callable[[Any], Any] | None = None if fusion is None else fusion._wrap
        self.sources: list[Source] = trace.sources
        self.tensor_sources: list[Source] = [s for s in trace.sources if not s.scalar]
        self.state_reads = trace.state_reads
        self.draws = trace.draws  # (device generator, blocks) per random draw, in program order
        # Outputs: the result's tensors and modules, then state writes, then running states.
        outputs: list[int] = []
        self.result_spec = result_spec
        self.results: list[Result] = []
        for leaf in result_leaves:
            if isinstance(leaf, Tensor):
                self.results.append(TensorResult(len(outputs), leaf._device))
                outputs.append(trace.output_ref(innermost(leaf)))
            elif isinstance(leaf, Module):
                params, states = module_leaves(leaf)
                self.results.append(ModuleResult(len(outputs), leaf))
                outputs.extend(trace.output_ref(innermost(p.val())) for p in params)
                outputs.extend(trace.output_ref(innermost(s.value())) for s in states)
            elif type(leaf) is SymScalar:
                self.results.append(ScalarResult(int(trace.scalar_slot(leaf)), type(leaf.value)))
            else:
                self.results.append(ValueResult(leaf))
        self.state_writes: list[StateWrite] = []
        for owner, key, value in trace.state_writes.values():
            fields: list[Field] = []
            for name, item in _writable_fields(value):
                if isinstance(item, Tensor):
                    fields.append(TensorField(name, len(outputs), item._device))
                    outputs.append(trace.output_ref(innermost(item)))
                elif type(item) is SymScalar:
                    fields.append(NumberField(name, int(trace.scalar_slot(item)), type(item.value)))
                else:
                    fields.append(StaticField(name, item))
            self.state_writes.append(StateWrite(owner, key, type(value), tuple(fields)))
        self.running_writes: list[RunningWrite] = []
        for state, value in trace.running_writes.values():
            self.running_writes.append(RunningWrite(trace.running_sources[id(state)], len(outputs), value._device))
            outputs.append(trace.output_ref(innermost(value)))
        graph = trace.graph
        graph.outputs = outputs
        graph = graph.prune()
        n_sym = len(trace.scalar_wanted)
        abstract, literals = graph.abstract_scalars(offset=n_sym)
        self.scalar_program = trace.scalars.compile(trace.scalar_wanted)
        self.graph = abstract
        # The trace's literals (betas, epsilon, a loss's scale) never change: constants.
        fixed = {n_sym + i: value for i, value in enumerate(literals)}
        self.literals: list[Any] = []
        self._donations_offered = self._donations(leaves, result_leaves)
        self._arg_offered = self._arg_donations(donate, spec, leaves, result_leaves)
        self._deferred: Callable[[], Any] | None = None
        if not _takes(executor.plan, "fixed_scalars"):  # such an executor gets them on every run
            self.plan = executor.plan(abstract)
            self.literals = literals
        elif isinstance(executor, ReplayExecutor):
            self.plan = executor.plan(abstract, fixed_scalars=fixed)
        elif defer_plan:
            # A compiling executor plans from the second run on: the first one replays
            # the recorded calls (an entry that runs once, such as the first step of an
            # optimizer whose states do not exist yet, is never compiled).
            self.plan = Replay(abstract, fixed=fixed)
            self._deferred = lambda: executor.plan(abstract, fixed_scalars=fixed)
        else:  # planned now: every run of this entry computes the same way
            self.plan = executor.plan(abstract, fixed_scalars=fixed)
        self.donated = self._donations_offered if accepts_donations(self.plan) else ()
        self.arg_donated = self._arg_offered if accepts_donations(self.plan) else ()
        self.owned: list[Any] = []  # per state read: the object a replay may update in place
        self.binding: Any = None  # the plan's Binding of the donated inputs (see ember.capture.runner)
        self.bind_failed = False
        self.model_out: Module | None = None  # the module this entry returns, kept across calls
        self.model_out_key: Any = None
        self.model_slots: list[Any] = []
        self._runner: Callable[[list[Any]], Any] | None = None
        self.code = ""  # the steady-state runner's source, once built
        self.row_slices: list[int | None] | None = None  # per result, the dim a bucketed call cuts

    # ------------------------------------------------------------------ donations
    def _donations(self, leaves: list[Any], result_leaves: list[Any]) -> tuple[tuple[int, int], ...]:
        """(output, input) pairs where an output replaces an input: the returned
        module's parameters (by id) and running states, and each written-back field of
        an optimizer state that was read. The plan writes the new values into the old
        arrays where its schedule allows (``LLVMPlan.run(donated=...)``)."""
        modules: Modules = {}
        index: dict[Any, int] = {}
        for n, source in enumerate(self.tensor_sources):
            place = source.place(leaves, modules)
            if place is not None:
                index[place] = n
        pairs: list[tuple[int, int]] = []
        for result, leaf in zip(self.results, result_leaves):
            if type(result) is ModuleResult:
                for j, p in enumerate(module_leaves(leaf)[0]):
                    i = index.get(("param", p.id))
                    if i is not None:
                        pairs.append((result.first + j, i))
        for running in self.running_writes:
            i = index.get(running.place())
            if i is not None:
                pairs.append((running.output, i))
        for write in self.state_writes:
            for field in write.fields:
                if type(field) is TensorField:
                    i = index.get(write.place(field))
                    if i is not None:
                        pairs.append((field.output, i))
        taken: set[int] = set()
        unique = []
        for k, i in sorted(pairs):
            if i not in taken:
                taken.add(i)
                unique.append((k, i))
        return tuple(unique)

    def _arg_donations(
        self, donate: frozenset[int], spec: Any, leaves: list[Any], result_leaves: list[Any]
    ) -> tuple[tuple[int, int], ...]:
        """(output, input) pairs for the arguments at positions ``donate`` (see
        :func:`ember.compile`): each tensor of those arguments, in order, with the first
        result tensor not yet paired of its shape and dtype (a cache passed in and
        returned updated pairs field by field)."""
        if not donate:
            return ()
        arg_specs = spec[1][0][1]  # spec of ((args...), {kwargs})
        wanted: list[int] = []

        def collect(item: Any) -> None:
            if type(item) is Leaf:
                if item.kind == "tensor":
                    wanted.append(item.index)
                return
            kind, items = item
            if kind == "static":
                return
            for child in items:
                collect(child[1] if kind is dict else child)

        for position in sorted(donate):
            if position < len(arg_specs):
                collect(arg_specs[position])
        index = {s.position: n for n, s in enumerate(self.tensor_sources) if type(s) is Argument}
        outputs = [
            (result.output, leaf)
            for result, leaf in zip(self.results, result_leaves)
            if type(result) is TensorResult and not leaf._device.is_autodiff()
        ]
        used: set[int] = set()
        pairs: list[tuple[int, int]] = []
        for leaf_index in wanted:
            i = index.get(leaf_index)
            tensor = leaves[leaf_index]
            if i is None or tensor._device.is_autodiff():
                continue
            shape, dtype = tensor.dims(), tensor.dtype
            for k, out in outputs:
                if k not in used and out.dims() == shape and out.dtype == dtype:
                    used.add(k)
                    pairs.append((k, i))
                    break
        return tuple(pairs)

    def read_only_modules(self, leaves: list[Any], model_leaves: list[int]) -> dict[int, Any] | None:
        """Weak references to the modules at ``model_leaves`` of an entry that returns no
        module, when a specialized run can read their parameters straight from the
        ``Param`` objects: no running states, every value a plain (not autodiff) tensor,
        none donated (a donated parameter is copied first: the generic path does it).
        ``None`` otherwise."""
        if any(type(s) is Running for s in self.sources):
            return None
        positions = {n for n, s in enumerate(self.tensor_sources) if type(s) is Parameter}
        if positions & {i for _, i in self.donated}:
            return None
        refs = {}
        for i in model_leaves:
            for p in module_leaves(leaves[i])[0]:
                if p._value is None or p._value._device.is_autodiff():
                    return None
            refs[i] = weakref.ref(leaves[i])
        return refs

    def own_states(self) -> None:
        """Remembers the state objects a specialized replay may update in place: each
        read state as it is now when it has the structure the trace read, else a
        marker no state is (the replay then takes the generic path and its checks)."""
        owned = []
        for read in self.state_reads:
            state = read.current()
            owned.append(state if state_template(state) == read.template else NOT_OWNED)
        self.owned[:] = owned  # the list generated code reads

    # ------------------------------------------------------------------ replay
    def run(self, leaves: list[Any]) -> Any:
        try:
            runner = self._runner
            if runner is not None:
                return runner(leaves)
            out = self.run_generic(leaves)
        except PartialRun as partial:  # an executor's error, with what it computed: the error itself
            raise partial.error from None
        if out is not RETRACE:
            if self._deferred is not None:  # the first run replayed: compile for the next ones
                self.plan = self._deferred()
                self._deferred = None
                self.donated = self._donations_offered if accepts_donations(self.plan) else ()
                self.arg_donated = self._arg_offered if accepts_donations(self.plan) else ()
            else:
                self._runner = build_runner(self, leaves)
        return out

    def drop_runner(self) -> None:
        """Forgets the steady-state runner and its binding (the next run is generic)."""
        self.binding = self._runner = None

    def reserve(self) -> list[tuple[int, int]]:
        """The Philox ``(key, counter)`` of each random draw, taken from each device's
        current generator in program order (as the eager function would)."""
        return [rng.current().reserve(blocks) for rng, blocks in self.draws]

    def release(self, drawn: list[tuple[int, int]]) -> None:
        """Give back the draws of a call that retraces instead of running."""
        for (rng, blocks), (key, counter) in reversed(list(zip(self.draws, drawn))):
            rng.current().release(key, counter, blocks)

    def run_generic(self, leaves: list[Any]) -> Any:
        """One replay that reads every input from its source and checks every state."""
        self.binding = None  # this run may replace the arrays a binding holds
        ready, wrap = self.ready, self.wrap
        if self.fusion is not None:  # see ember.capture.runner
            self.fusion.flush()
        inputs: list[Any] = []
        scalar_inputs: list[Any] = []
        modules: Modules = {}
        for source in self.sources:
            value = source.read(leaves, modules)
            if value is RETRACE:
                return RETRACE
            if source.scalar:
                scalar_inputs.append(value)  # a RandomDraw is filled once the guards below pass
            else:
                inputs.append(value if ready is None else ready(value))
        for read in self.state_reads:
            if state_template(read.current()) != read.template:
                return RETRACE
        drawn: list[tuple[int, int]] = []
        if self.draws:
            drawn = self.reserve()
            scalar_inputs = [v.reserved(drawn) if type(v) is RandomDraw else v for v in scalar_inputs]
        scalars = self.scalar_program(scalar_inputs)
        if scalars is None:
            self.release(drawn)
            return RETRACE
        # Donated inputs are copied first: the arrays passed in are read, not changed
        # (a model that is not the one this entry returned, states written elsewhere).
        for _, i in self.donated:
            inputs[i] = np.array(inputs[i], order="C", copy=True)
        donated = self.donated
        if self.arg_donated:  # the caller gave these up (compile(donate=...)): no copy
            positions = [i for _, i in self.arg_donated]
            for i, array in zip(positions, given([inputs[i] for i in positions])):
                inputs[i] = array
            donated = donated + self.arg_donated
        values = self.plan.run(self.backend, inputs, scalars + self.literals, donated)
        for write in self.state_writes:
            write.apply(values, scalars, wrap)
        for running in self.running_writes:
            if leaves[running.source.module] is self.model_out and self.model_out is not None:
                continue  # the module this entry returned: _module_out updates its states' tensors
            running.apply(leaves, modules, values, wrap)
        self.own_states()
        out_leaves: list[Any] = []
        for result in self.results:
            if type(result) is TensorResult:
                out_leaves.append(tensor_on(values[result.output], result.device, wrap))
            elif type(result) is ModuleResult:
                out_leaves.append(self._module_out(result.traced, values, result.first))
            elif type(result) is ScalarResult:
                out_leaves.append(result.kind(scalars[result.slot]))
            else:
                assert type(result) is ValueResult
                out_leaves.append(result.value)
        return unflatten(self.result_spec, out_leaves)

    def _module_out(self, traced: Module, values: list[Any], first: int) -> Module:
        """The returned module: built once, then its buffers updated in place."""
        wrap = self.wrap
        if self.model_out is None:
            params, states = module_leaves(traced)
            arrays = iter(values[first:])
            new_params = {p.id: Param(p.id, tensor_on(next(arrays), p.device, wrap), p.require_grad) for p in params}
            new_states = {id(s): RunningState(tensor_on(next(arrays), s.value()._device, wrap), s.id) for s in states}
            from ember.module.visitor import FnMapper

            self.model_out = traced.map(FnMapper(lambda p, path: new_params[p.id], lambda s, path: new_states[id(s)]))
            self.model_out_key = module_key(self.model_out)
            # What a replay updates in place: each value's autodiff wrapper or tensor.
            out_params, out_states = module_leaves(self.model_out)
            values_out = [p.val() for p in out_params] + [s.value() for s in out_states]
            self.model_slots = [
                ("autodiff", t._primitive) if t._device.is_autodiff() else ("plain", t) for t in values_out
            ]
            return self.model_out
        for (kind, holder), array in zip(self.model_slots, values[first : first + len(self.model_slots)]):
            if wrap is not None:
                array = wrap(array)
            if kind == "autodiff":
                holder.inner = array
            else:
                holder._primitive = array
        return self.model_out


def _writable_fields(value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, Tensor):
        return [("", value)]
    if dataclasses.is_dataclass(value):
        return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
    raise GraphBreak(f"ember: compile: cannot write back a state of type {type(value).__name__}")
