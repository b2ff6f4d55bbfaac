"""One compiled expansion of a plan's graph (see :mod:`ember.backend.fusion.llvm.executor`).

:class:`Variant` expands the graph for its scalars, schedules it, places its buffers
in an arena, generates one LLVM function per run of compiled steps and JIT-compiles
them; its run is generated Python (:mod:`.runner`), which calls back into the
variant to bind inputs, run eager calls between segments and report failures.
"""

from __future__ import annotations

import array
import ctypes
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.backend.fusion.chains import fuse_conv_chains
from ember.backend.fusion.decompose import call_node
from ember.backend.fusion.graph import Graph, Ref
from ember.backend.fusion.llvm import flash_graph
from ember.backend.fusion.llvm.chains import chain_scratch
from ember.backend.fusion.llvm.codegen import ModuleBuilder, write_tables
from ember.backend.fusion.llvm.library import LIBRARY
from ember.backend.fusion.llvm.native_calls import NATIVE, NATIVE_WORK, segment_work
from ember.backend.fusion.llvm.runner import UNIQUE, generate, runner_code, unbound
from ember.backend.fusion.memory import ALIGN, plan_memory
from ember.backend.fusion.primitive_graph import expand
from ember.backend.fusion.quant_epilogue import fold_activations
from ember.backend.fusion.replay import PartialRun, ReplayError
from ember.backend.fusion.scalars import SymScalar
from ember.backend.fusion.scheduler import Buffer, Call, Kernel, Library, schedule
from ember.backend.fusion.steps import ConvChain
from ember.backend.kernel.llvm import arrays, jit
from ember.backend.kernel.llvm.loops import scratch_bytes
from ember.backend.kernel.views import View, size_of

if TYPE_CHECKING:
    from ember.backend.fusion.llvm.executor import Binding, LLVMExecutor

_ENTRY = ctypes.CFUNCTYPE(None)
_HANDLE = arrays.handle


def _symbols(args: Any) -> list[SymScalar]:
    """The run-time scalars in a nested argument structure."""
    kind = type(args)
    if kind is SymScalar:
        return [args]
    if kind is tuple or kind is list:
        return [s for a in args for s in _symbols(a)]
    return []


class Variant:
    """One compiled expansion of a plan's graph (see the module docstring)."""

    # Set by :func:`~ember.backend.fusion.llvm.runner.generate`: the generated code's
    # globals, the shapes of fresh outputs, and per input position its pointer-table
    # slot (-1: none) and whether a donated output is written into it.
    _env: dict[str, Any]
    _fresh_shape: dict[int, tuple[int, ...]]
    _input_slots: dict[int, tuple[int, bool]]

    def __init__(
        self,
        graph: Graph,
        scalars: Sequence[Any],
        executor: LLVMExecutor,
        fixed: dict[int, Any] | None = None,
        donated: tuple = (),
    ):
        start, start_cpu = time.perf_counter(), time.process_time()
        target = executor.target
        fixed = fixed or {}
        self.offered = donated
        self.expanded = expand(fold_activations(graph), list(scalars), target.expands, fixed, fold=True)
        flash = flash_graph.mode()
        if flash != "off":
            flash_graph.use_flash(self.expanded, target, everywhere=flash == "on")
        sched = self.schedule = schedule(self.expanded, target)
        if executor.conv_chains:
            fuse_conv_chains(sched)
        buffers = sched.buffers
        # Scratch (rows of reductions along outer dims, im2col columns): private
        # buffers of their step.
        extra: dict[int, int] = {}
        scratch: dict[int, int] = {}
        for index, step in enumerate(sched.steps):
            nbytes = 0
            if isinstance(step, Kernel):
                nbytes = scratch_bytes(step)
            elif isinstance(step, Library):
                nbytes = LIBRARY[step.node.op].scratch(sched.graph, step.node).get("size", 0)
            elif isinstance(step, ConvChain):
                nbytes = chain_scratch(sched.graph, step, buffers)["size"]
            if nbytes:
                buffers.append(Buffer(len(buffers), (nbytes,), np.dtype(np.uint8), "temp", scratch=True))
                extra[len(buffers) - 1] = index
                scratch[index] = len(buffers) - 1
        self.scratch = scratch  # step index -> its scratch buffer
        memory = self.memory = plan_memory(sched, extra, donated)
        self.donated = memory.donated
        aliases = memory.aliases
        self.arena = np.zeros(memory.arena_bytes + ALIGN, np.uint8)
        base = self.arena.ctypes.data
        self._arena_shift = (-base) % ALIGN
        self._arena_addr = base + self._arena_shift

        # Segments: runs of compiled steps, and the eager calls between them.
        groups: list[tuple[bool, list[int]]] = []
        for index, step in enumerate(sched.steps):
            compiled = not isinstance(step, Call)
            if groups and groups[-1][0] == compiled:
                groups[-1][1].append(index)
            else:
                groups.append((compiled, [index]))
        self._groups = groups
        # Buffers compiled code reaches through the ext table: all but the arena's
        # (a donated output is reached through its input's entry).
        ext: dict[int, int] = {}
        for compiled, steps in groups:
            if compiled:
                for index in steps:
                    step = sched.steps[index]
                    for buf in sorted(step.reads() | step.writes()):
                        buf = aliases.get(buf, buf)
                        if buf not in memory.offsets and buf not in ext:
                            ext[buf] = len(ext)
        self._ext = ext
        self._ptrs = array.array("Q", [0] * max(len(ext), 1))
        self._ptrs_addr = self._ptrs.buffer_info()[0]

        # Run-time scalars: the kernels' slots, then those the eager calls take.
        self._n_slots = len(sched.scalars)
        wanted = [sym.index for sym in sched.scalars]
        self._call_scalars: dict[int, int] = {}
        for step in sched.steps:
            if isinstance(step, Call):
                for sym in _symbols((step.node.args, step.node.kwargs)):
                    if id(sym) not in self._call_scalars:
                        self._call_scalars[id(sym)] = len(wanted) - self._n_slots
                        wanted.append(sym.index)
        # Status words: a failed index check of a library step (see library.py).
        self._status = array.array("q", [0, 0])
        self._checks = [
            any(isinstance(s := sched.steps[i], Library) and LIBRARY[s.node.op].checks for i in steps)
            for compiled, steps in groups
        ]
        self._scalar_values = array.array("d", [0.0] * max(self._n_slots, 1))
        self._scalars_addr = self._scalar_values.buffer_info()[0]
        self._program = self.expanded.program.compile(wanted, pack=(self._scalar_values, self._n_slots))
        free = [i for i in range(len(scalars)) if i not in fixed]
        self._free = None if free == list(range(len(free))) else free

        prefix = "ember_plan"  # one module per engine: the names need not differ between plans
        entries: list[str] = []
        self.optimize_s = self.codegen_s = 0.0
        self._compiled = None
        if any(compiled for compiled, _ in groups):
            builder = ModuleBuilder(
                sched,
                prefix,
                memory.offsets,
                ext,
                scratch,
                executor.blas,
                arrays.DATA_OFFSET,
                target.blas_threshold,
                aliases,
                stop_on_failure=bool(self.donated),
            )
            native = []
            for n, (compiled, steps) in enumerate(groups):
                if compiled:
                    builder.segment(f"{prefix}_s{n}", steps)
                    entries.append(f"{prefix}_e{n}")
                    # Short segments are called as Python builtins; long ones through
                    # ctypes, which lets other threads run meanwhile (see NATIVE_WORK).
                    native.append(NATIVE is not None and segment_work(sched, steps) <= NATIVE_WORK)
                    builder.entry(
                        entries[-1], f"{prefix}_s{n}", NATIVE.incref if NATIVE is not None and native[-1] else 0
                    )
            self.ir = builder.build()
            # The IR names no address of this process (see codegen.TABLES): the machine
            # code an earlier process compiled for the same IR is loaded from disk.
            self._compiled = jit.compile_module(self.ir, entries, cache=True, data=(builder.tables_name,))
            self.optimize_s, self.codegen_s = self._compiled.optimize_s, self._compiled.codegen_s
            write_tables(
                self._compiled.addresses[builder.tables_name],
                self._arena_addr,
                self._ptrs_addr,
                self._scalars_addr,
                self._status.buffer_info()[0],
            )
        self._native_defs: list[Any] = []  # method definitions of native entries (alive as long as they)
        addresses = self._compiled.addresses if self._compiled is not None else {}  # None: no entries
        self._entries = (
            [
                self._native(addresses[name], name) if is_native else _ENTRY(addresses[name])
                for name, is_native in zip(entries, native)
            ]
            if entries
            else []
        )
        self._source_outputs = list(graph.outputs)
        self._views: dict[tuple[int, View], np.ndarray] = {}
        self._held_runners: dict[tuple[int, ...], Any] = {}
        self.code, self.run = generate(self, buffers, memory, aliases)
        self.compile_s = time.perf_counter() - start
        self.compile_cpu_s = time.process_time() - start_cpu

    def _native(self, address: int, name: str) -> Any:
        """A builtin function object calling the native entry at ``address``."""
        calls = NATIVE
        assert calls is not None, "an entry is native only where CPython's API is"
        definition = calls.MethodDef(name.encode(), address, calls.METH_NOARGS, None)
        self._native_defs.append(definition)
        return calls.new(ctypes.addressof(definition), self._native_defs, None)

    def held_runner(self, binding: Binding) -> Any:
        """The runner of ``binding``'s runs (see :meth:`LLVMPlan.bind`):
        ``runner(backend, inputs, scalars, miss=True)``, which holds the plan's lock and,
        when the scalars fail this variant's guards, hands the run to ``binding``
        (``miss``) or returns ``None``."""
        held = {k: n for n, k in enumerate(binding.positions)}
        return runner_code(self, f"run_held{next(UNIQUE)}", held, binding)[1]

    def _hold(self, binding: Binding) -> None:
        """Installs a binding's arrays in the pointer table (and forgets what the plain
        runner bound there)."""
        for k, array_ in zip(binding.positions, binding.arrays):
            slot, _ = self._input_slots[k]
            if slot >= 0:
                self._ptrs[slot] = _HANDLE(array_)
            self._env[f"l{k}"] = unbound
        self._env["HOLDER"] = binding

    def _failure(self, arrays: dict[int, Any], last: int) -> PartialRun:
        """The error of a failed index check (the status words name the step and the
        index), with the outputs that are valid: those of the steps that ran up to
        ``last`` and do not depend on the failing one (a plan with donations stops
        at the failing step, so that nothing is written in place after it)."""
        code, bad = self._status
        self._status[0] = self._status[1] = 0
        index = code - 1
        step = self.schedule.steps[index]
        assert isinstance(step, Library), "index checks are library steps'"
        node = step.node
        avals = self.schedule.graph.avals
        if node.op == "max_pool_backward":
            size = size_of(tuple(node.args[2][2:]))
            what = f"ember: max_pool_backward: index {bad} is out of bounds for a plane of size {size}"
        elif node.op == "embedding_backward":
            size = node.args[2]
            what = f"ember: embedding: index {bad} is out of bounds for {size} embeddings"
        else:
            dim = node.args[1]
            size = avals[node.args[0]].shape[dim]
            op = "scatter" if node.op == "scatter_add" else node.op
            what = f"ember: {op}: index {bad} is out of bounds for dim {dim} of size {size}"
        from ember.errors import IndexOutOfBoundsError

        error = IndexOutOfBoundsError(f"{what} (indices must lie in [0, {size}))")
        steps = self.schedule.steps
        ran = index if self.donated else last + 1
        tainted = set(steps[index].writes())
        for step in steps[index + 1 : ran]:
            if step.reads() & tainted:
                tainted |= step.writes()
        producer = self.schedule.producer
        computed = {}
        for ref, (buf, view) in zip(self._source_outputs, self.schedule.outputs):
            source = self.memory.aliases.get(buf, buf)
            kind = self.schedule.buffers[buf].kind
            if source in arrays and buf not in tainted and (kind in ("input", "const") or producer[buf] < ran):
                computed[ref] = self._view(arrays[source], view)
        return PartialRun(error, computed)

    def _bind(self, k: int, a: np.ndarray, slot: int, donated: bool) -> np.ndarray:
        """Binds the array ``a`` of input ``k`` to its pointer-table ``slot``: a dense
        array as it is (remembered by a weak reference, so the next run with it binds
        nothing and the plan keeps no array alive), anything else through a dense copy
        (made again each run). A donated input must also be writable."""
        direct = a.flags.c_contiguous and (not donated or a.flags.writeable)
        if not direct:
            a = np.array(a, order="C", copy=True)
        if slot >= 0:
            self._ptrs[slot] = _HANDLE(a)
        self._env[f"l{k}"] = weakref.ref(a) if direct else unbound
        return a

    def _view(self, base: np.ndarray, view: View) -> np.ndarray:
        """``view`` of a (non-arena) buffer's array, without a copy where possible."""
        if view.shape == base.shape and view.offset == 0 and base.flags.c_contiguous and view.is_contiguous():
            return base
        if view.offset == 0 and view.size == base.size and view.is_contiguous() and base.flags.c_contiguous:
            return base.reshape(view.shape)
        return _strided(np.ascontiguousarray(base).reshape(-1), view)

    def _computed(self, arrays: list[Any], done: int) -> dict[int, Any]:
        """The outputs whose values exist after the first ``done`` segments (and the
        calls of the failing segment before the failing one)."""
        finished = {i for _, steps in self._groups[:done] for i in steps}
        producer = self.schedule.producer
        out = {}
        for ref, (buf, view) in zip(self._source_outputs, self.schedule.outputs):
            kind = self.schedule.buffers[buf].kind
            if (
                kind in ("input", "const")
                or producer.get(buf) in finished
                or (kind == "call" and arrays[buf] is not None)
            ):
                source = self.memory.aliases.get(buf, buf)
                if arrays[source] is not None:
                    out[ref] = self._array(arrays, source, view)
        return out

    def _call(self, backend: Any, call: Call, arrays: list[Any], scalars: list[Any], keep: list) -> None:
        node = call.node
        positions = self._call_scalars

        def ref_value(ref: Ref) -> Any:
            buf, view = call.args[ref]
            return self._array(arrays, self.memory.aliases.get(buf, buf), view)

        leaves = call_node(backend, node, ref_value, lambda s: scalars[positions[id(s)]])
        avals = self.expanded.graph.avals
        lo, hi = self._arena_addr, self._arena_addr + self.memory.arena_bytes
        for value, buf, leaf in zip(node.outs, call.outs, leaves):
            aval = avals[value]
            if tuple(leaf.shape) != aval.shape or leaf.dtype != aval.dtype:
                raise ReplayError(
                    f"ember: fusion: {node.op} gave {list(leaf.shape)} {leaf.dtype}, but the graph inferred "
                    f"{list(aval.shape)} {aval.dtype}; this is a bug in ember's shape rules"
                )
            if leaf.size and lo <= leaf.ctypes.data < hi:
                leaf = leaf.copy()  # a view of the arena would be overwritten by a later run
            arrays[buf] = leaf
            slot = self._ext.get(buf, -1)
            if slot >= 0:
                if not leaf.flags.c_contiguous:
                    leaf = np.ascontiguousarray(leaf)
                    keep.append(leaf)
                self._ptrs[slot] = _HANDLE(leaf)

    def _array(self, arrays: list[Any], buf: int, view: View) -> np.ndarray:
        """A buffer's values through ``view`` as a numpy array."""
        base = arrays[buf]
        if base is None:  # an arena buffer: views of it are built once
            key = (buf, view)
            cached = self._views.get(key)
            if cached is None:
                b = self.schedule.buffers[buf]
                offset = self._arena_shift + self.memory.offsets[buf]
                region = self.arena[offset : offset + b.nbytes].view(b.dtype)
                cached = self._views[key] = _strided(region, view)
            return cached
        return self._view(base, view)


def _strided(flat: np.ndarray, view: View) -> np.ndarray:
    """``view`` over the dense rank-1 array ``flat``."""
    if view.size == 0:
        return np.empty(view.shape, flat.dtype)
    item = flat.dtype.itemsize
    return np.ndarray(
        view.shape, flat.dtype, buffer=flat, offset=view.offset * item, strides=tuple(s * item for s in view.strides)
    )
