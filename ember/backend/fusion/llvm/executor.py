"""The LLVM executor: plans that run a graph as compiled code plus eager calls.

``LLVMExecutor().plan(graph)`` takes a graph whose run-time scalars are
:class:`~ember.backend.fusion.graph.Sc` placeholders (``Graph.abstract_scalars``);
``fixed_scalars`` names placeholders whose values never change (a captured step's
literals: betas, epsilon), which compile as constants.
On its first run a plan compiles a *variant*: it expands the graph's composites
for the scalars given (:mod:`~ember.backend.fusion.primitive_graph`), groups it into kernels
(:mod:`~ember.backend.fusion.scheduler`), runs each convolution chain per sample
(:mod:`~ember.backend.fusion.chains`, unless ``LLVMExecutor(conv_chains=False)``), places its buffers in an arena
(:mod:`~ember.backend.fusion.memory`), generates one LLVM function per run of
compiled steps (:mod:`~ember.backend.fusion.llvm.codegen`) and JIT-compiles them.
``plan.run(flex, inputs, scalars)`` then computes the variant's scalars from the
run's (a decomposition's truth test on one, such as ``if weight_decay:``, is a
guard: other answers compile another variant), makes each compiled segment one
ctypes call, and runs the nodes left to flex between segments, as replay does.

``plan.run(..., donated=((k, i), ...))`` offers output ``k`` the buffer of input
``i`` (:func:`~ember.backend.fusion.memory.donate` accepts the safe pairs): the
returned array of an accepted pair *is* ``inputs[i]``, updated in place. The caller
gives up ``inputs[i]``: it must not be read as the old value afterwards, and must
not share memory with another input.

A variant's run is one generated Python function (:meth:`Variant._generate`): it
computes the scalars straight into the buffer compiled code reads, binds each
input to the pointer table only when it is not the array bound last time (a
training loop passes the same arrays), allocates the returned buffers that are not donated, and calls
each compiled segment without arguments (the tables' addresses are constants of
the code): a short segment as a Python builtin, a long one through ctypes (see
:data:`NATIVE_WORK`). ``plan.bind(donated, arrays)`` (a :class:`Binding`) goes
further for a training loop: the donated inputs stay bound across runs.
"""

from __future__ import annotations

import array
import ctypes
import itertools
import sys
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember.backend.flex import blas as blas_mod
from ember.backend.fusion.chains import fuse_conv_chains
from ember.backend.fusion.decompose import call_node
from ember.backend.fusion.graph import Graph, Ref
from ember.backend.fusion.llvm.chains import chain_scratch
from ember.backend.fusion.llvm.codegen import ModuleBuilder
from ember.backend.fusion.llvm.library import LIBRARY
from ember.backend.fusion.llvm.support import BLAS_THRESHOLD, LLVMTarget
from ember.backend.fusion.memory import ALIGN, plan_memory
from ember.backend.fusion.plan import Executor, Plan
from ember.backend.fusion.primitive_graph import expand
from ember.backend.fusion.replay import PartialRun, ReplayError
from ember.backend.fusion.scalars import SymScalar
from ember.backend.fusion.scheduler import Buffer, Call, Kernel, Library, schedule
from ember.backend.fusion.steps import ConvChain
from ember.backend.kernel.llvm import arrays, jit
from ember.backend.kernel.llvm.loops import scratch_bytes
from ember.backend.kernel.views import View, size_of

_ENTRY = ctypes.CFUNCTYPE(None)
_PLAN_IDS = itertools.count()
_HANDLE = arrays.handle


def _unbound() -> None:
    """A weak reference to nothing: no array is bound yet."""
    return None


#: Returned buffers of at most this many bytes are allocated fresh on each run;
#: larger ones are recycled (see :func:`_recycle`).
SMALL_OUTPUT = 4096

#: Compiled segments of at most this much work (about one unit per element a kernel
#: writes or multiply-add a matmul or convolution does) are called as Python
#: builtins (tens of nanoseconds, holding the GIL for the few microseconds they run)
#: rather than through ctypes (several hundred nanoseconds, releasing the GIL).
NATIVE_WORK = 100_000


class _NativeCalls:
    """CPython's API for builtin functions made from compiled code (``None`` where
    it is missing, e.g. on another Python implementation: ctypes is used then)."""

    METH_NOARGS = 0x0004

    class MethodDef(ctypes.Structure):
        _fields_ = [
            ("name", ctypes.c_char_p),
            ("meth", ctypes.c_void_p),
            ("flags", ctypes.c_int),
            ("doc", ctypes.c_char_p),
        ]

    def __init__(self) -> None:
        api = ctypes.pythonapi
        incref = ctypes.cast(api.Py_IncRef, ctypes.c_void_p).value
        assert incref is not None, "Py_IncRef has an address"
        self.incref: int = incref
        self.new = api.PyCFunction_NewEx
        self.new.restype = ctypes.py_object
        self.new.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.py_object]


def _native_calls() -> _NativeCalls | None:
    try:
        return _NativeCalls() if sys.implementation.name == "cpython" else None
    except (AttributeError, OSError):  # pragma: no cover - no CPython API
        return None


_NATIVE = _native_calls()


def _work(schedule: Any, steps: list[int]) -> int:
    """A segment's work, roughly (see :data:`NATIVE_WORK`)."""
    total = 0
    for index in steps:
        step = schedule.steps[index]
        if isinstance(step, Kernel):
            total += size_of(step.space)
        elif isinstance(step, (Library, ConvChain)):
            total += sum(schedule.buffers[b].nbytes for b in step.writes()) * 64  # convolutions: a bound
        else:
            out = schedule.buffers[step.out].shape
            total += size_of(out) * step.a[1].shape[-1]
    return total


def _symbols(args: Any) -> list[SymScalar]:
    """The run-time scalars in a nested argument structure."""
    kind = type(args)
    if kind is SymScalar:
        return [args]
    if kind is tuple or kind is list:
        return [s for a in args for s in _symbols(a)]
    return []


class LLVMExecutor(Executor):
    """Compiles fusion graphs for the CPU. Plans are cached by structure, in-process."""

    name = "llvm"

    def __init__(self, blas_threshold: int = BLAS_THRESHOLD, conv_chains: bool = True) -> None:
        super().__init__()
        self.plan_class = LLVMPlan
        self.blas = blas_mod.load()
        self.target = LLVMTarget(self.blas, blas_threshold)
        #: Whether a convolution, its elementwise epilogue and a max pooling run per
        #: sample as one step (:mod:`ember.backend.fusion.chains`).
        self.conv_chains = conv_chains
        self.stats["compile_cpu_s"] = 0.0

    def plan(self, graph: Graph, fixed_scalars: dict[int, Any] | None = None) -> LLVMPlan:
        plan = super().plan(graph, fixed_scalars)
        assert isinstance(plan, LLVMPlan)
        return plan


class LLVMPlan(Plan):
    """A graph structure for the CPU: its compiled variants, one per answer to the
    truth tests its decompositions make on run-time scalars (usually one) and per
    set of donations offered (see :class:`~ember.backend.fusion.plan.Plan`)."""

    target = "LLVM"
    accepts_donations = True
    executor: LLVMExecutor

    def lower(self, backend: Any, scalars: Sequence[Any], donated: tuple) -> Variant:
        return Variant(self.graph, scalars, self.executor, self.fixed, donated)

    def lowered(self, variant: Variant) -> None:
        super().lowered(variant)
        self.executor.count("compile_cpu_s", variant.compile_cpu_s)

    def bind(self, donated: tuple, arrays: list[np.ndarray]) -> Binding | None:
        """A :class:`Binding` that holds the inputs of the pairs of ``donated`` this
        plan accepted (:meth:`donated`; ``arrays`` are those inputs' arrays, by input
        position), or ``None`` when there are none or an array cannot be written in
        place (not dense or not writable)."""
        accepted = self.donated(donated)
        positions = tuple(sorted(i for _, i in accepted))
        if not positions or len(arrays) != len(positions):
            return None
        for a in arrays:
            if not (isinstance(a, np.ndarray) and a.flags.c_contiguous and a.flags.writeable):
                return None
        if len({id(a) for a in arrays}) != len(arrays):
            return None
        return Binding(self, donated, accepted, positions, list(arrays))

    @property
    def memory(self) -> Any:
        return self.variants[-1].memory


class Binding:
    """A plan with the inputs of its accepted donations held across runs.

    ``LLVMPlan.bind(donated, arrays)`` hands the plan the arrays of those inputs (a
    training step's parameters and optimizer moments); each :meth:`run` takes only
    the other inputs and updates the held arrays in place, returning the outputs
    that were not written into them. Nothing about the held arrays is checked or
    rebound per run: the caller must not replace or resize them while it uses the
    binding (to change them, bind again).
    """

    def __init__(
        self, plan: LLVMPlan, offered: tuple, accepted: tuple, positions: tuple[int, ...], arrays: list[np.ndarray]
    ):
        self.plan = plan
        self.offered = offered
        self.accepted = accepted
        self.positions = positions  # held input positions, ascending
        self.arrays = arrays
        self._runners: dict[Variant, Any] = {}  # per variant: its runner of this binding
        #: ``run(backend, inputs, scalars)``: the outputs not written into held arrays,
        #: for the other ``inputs`` (in input order) and ``scalars``; ``None`` when the
        #: variant these scalars need does not accept the same donations (bind again
        #: then). It is the generated runner of the variant that ran last.
        self.run: Callable[..., list[Any] | None] = self._miss

    def runner(self, variant: Variant) -> Any:
        """``variant``'s runner of this binding (generated on first use)."""
        runner = self._runners.get(variant)
        if runner is None:
            runner = self._runners[variant] = variant.held_runner(self)
        return runner

    def _miss(self, backend: Any, inputs: list[Any], scalars: list[Any]) -> list[Any] | None:
        """A run whose scalars the last variant's guards refused (or the first run):
        another variant's, compiled if needed."""
        plan = self.plan
        with plan._lock:
            if plan.replay is not None:
                return None
            for variant in plan.variants:
                if variant.offered == self.offered and variant.donated == self.accepted:
                    runner = self.runner(variant)
                    out = runner(backend, inputs, scalars, False)
                    if out is not None:
                        self.run = runner
                        return out
            fresh = plan._lower(backend, scalars, self.offered)
            if fresh is None or fresh.donated != self.accepted:
                return None
            self.run = self.runner(fresh)
            return self.run(backend, inputs, scalars, False)


class Variant:
    """One compiled expansion of a plan's graph (see the module docstring)."""

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
        self.expanded = expand(graph, list(scalars), target.expands, fixed, fold=True)
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

        prefix = f"ember_p{next(_PLAN_IDS)}"
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
                self._status.buffer_info()[0],
                stop_on_failure=bool(self.donated),
            )
            native = []
            for n, (compiled, steps) in enumerate(groups):
                if compiled:
                    builder.segment(f"{prefix}_s{n}", steps)
                    entries.append(f"{prefix}_e{n}")
                    # Short segments are called as Python builtins; long ones through
                    # ctypes, which lets other threads run meanwhile (see NATIVE_WORK).
                    native.append(_NATIVE is not None and _work(sched, steps) <= NATIVE_WORK)
                    builder.entry(
                        entries[-1],
                        f"{prefix}_s{n}",
                        self._arena_addr,
                        self._ptrs_addr,
                        self._scalars_addr,
                        _NATIVE.incref if _NATIVE is not None and native[-1] else 0,
                    )
            self.ir = builder.build()
            self._compiled = jit.compile_module(self.ir, entries)
            self.optimize_s, self.codegen_s = self._compiled.optimize_s, self._compiled.codegen_s
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
        self.code, self.run = self._generate(buffers, memory, aliases)
        self.compile_s = time.perf_counter() - start
        self.compile_cpu_s = time.process_time() - start_cpu

    def _native(self, address: int, name: str) -> Any:
        """A builtin function object calling the native entry at ``address``."""
        calls = _NATIVE
        assert calls is not None, "an entry is native only where CPython's API is"
        definition = calls.MethodDef(name.encode(), address, calls.METH_NOARGS, None)
        self._native_defs.append(definition)
        return calls.new(ctypes.addressof(definition), self._native_defs, None)

    # ------------------------------------------------------------------ the runner
    def _generate(self, buffers: list[Buffer], memory: Any, aliases: dict[int, int]) -> tuple[str, Any]:
        """The run function of this variant, as straight-line Python (see the module
        docstring): ``run(backend, inputs, scalars) -> outputs``, or ``None`` when the
        scalars fail this variant's guards."""
        self._env: dict[str, Any] = {
            "V": self,
            "P": self._ptrs,
            "program": self._program,
            "empty": np.empty,
            "recycle": _recycle,
            "PartialRun": PartialRun,
            "ident": _HANDLE,
            "HOLDER": None,
            "STATUS": self._status,
        }
        self._fresh_shape = fresh_shape = {b.id: b.shape for b in buffers if b.id in memory.outputs}
        # Fresh buffers take the shape of the (first) output they hold, sparing a reshape.
        for buf, view in reversed(self.schedule.outputs):
            if (
                buf in fresh_shape
                and view.offset == 0
                and view.size == size_of(buffers[buf].shape)
                and view.is_contiguous()
            ):
                fresh_shape[buf] = view.shape
        for b in buffers:
            if b.kind == "const":
                array_ = np.ascontiguousarray(self.expanded.graph.consts[b.value])
                self._env[f"c{b.id}"] = array_
                slot = self._ext.get(b.id, -1)
                if slot >= 0:
                    self._ptrs[slot] = _HANDLE(array_)
        # Per input position: its buffer's pointer-table slot (-1: none) and whether a
        # donated output is written into it.
        graph = self.expanded.graph
        position = {v: k for k, v in enumerate(graph.inputs)}
        sources = set(aliases.values())
        self._input_slots: dict[int, tuple[int, bool]] = {}
        for b in buffers:
            if b.kind == "input":
                self._input_slots[position[b.value]] = (self._ext.get(b.id, -1), b.id in sources)
        return self._runner_code("run", None)

    def _runner_code(
        self, fn_name: str, held: dict[int, int] | None, binding: Binding | None = None
    ) -> tuple[str, Any]:
        """Generates ``fn_name``: the plain runner (``held is None``) or the runner of a
        :class:`Binding` (``held``: input position -> index in the binding's arrays),
        which takes the other inputs and returns the outputs not written into held
        arrays."""
        sched = self.schedule
        graph = self.expanded.graph
        buffers = sched.buffers
        aliases = self.memory.aliases
        env = self._env
        tag = ""
        if binding is not None:  # a binding's names, apart from other bindings' in the same globals
            tag = str(next(_PLAN_IDS))
            env.update({f"B{tag}": binding, "LOCK": binding.plan._lock, f"MISS{tag}": binding._miss})
        fresh_shape = self._fresh_shape
        positions = [k for k in range(len(graph.inputs)) if held is None or k not in held]
        args = "backend, inputs, scalars" if held is None else "backend, inputs, scalars, miss=True"
        lines = [f"def {fn_name}({args}):"]
        add = lines.append
        add("    global HOLDER")
        if held is not None:
            add("    LOCK.acquire()")
            add("    try:")
        start = len(lines)
        if self._free is None:
            add("    rest = program(scalars)")
        else:
            env["FREE"] = self._free
            add("    rest = program([scalars[i] for i in FREE])")
        if held is None:
            add("    if rest is None: return None")
            add("    HOLDER = None")  # a plain run may rebind any slot a binding held
        else:
            add(f"    if rest is None: return MISS{tag}(backend, inputs, scalars) if miss else None")
            add(f"    if B{tag} is not HOLDER: V._hold(B{tag})")
        names: dict[int, str] = {}
        if positions:
            add(f"    {''.join(f'i{k}, ' for k in positions)}= inputs")
        for b in buffers:
            if b.kind == "const":
                names[b.id] = f"c{b.id}"
            if b.kind != "input":
                continue
            k = graph.inputs.index(b.value)
            if held is not None and k in held:
                names[b.id] = f"B{tag}.arrays[{held[k]}]"
                continue
            name = names[b.id] = f"i{k}"
            slot, donated = self._input_slots[k]
            if slot < 0 and not donated:
                continue
            env.setdefault(f"l{k}", _unbound)
            add(f"    if {name} is not l{k}():")
            add(f"        {name} = V._bind({k}, {name}, {slot}, {donated})")
        for buf, source in aliases.items():
            names[buf] = names[source]
        for buf, shape in fresh_shape.items():
            name = names[buf] = f"f{buf}"
            dtype = buffers[buf].dtype
            env[f"s{buf}"], env[f"d{buf}"] = shape, dtype
            if buffers[buf].nbytes <= SMALL_OUTPUT:
                add(f"    {name} = empty(s{buf}, d{buf})")
            else:
                env.setdefault(f"pool{buf}", [])
                add(f"    {name} = recycle(pool{buf}, s{buf}, d{buf})")
            slot = self._ext.get(buf, -1)
            if slot >= 0:
                add(f"    P[{slot}] = ident({name})")
        mixed = any(not compiled for compiled, _ in self._groups)
        if mixed:
            add(f"    values = [None] * {len(buffers)}")
            for buf, name in names.items():
                add(f"    values[{buf}] = {name}")
            add("    keep = []")
        entry = 0
        for n, (compiled, steps) in enumerate(self._groups):
            if compiled:
                env[f"e{entry}"] = self._entries[entry]
                add(f"    e{entry}()")
                if self._checks[n]:
                    known = ", ".join(
                        f"{buf}: {name}" for buf, name in names.items() if not name.startswith(("values", "B"))
                    )
                    add(f"    if STATUS[0]: raise V._failure({{{known}}}, {steps[-1]})")
                entry += 1
                continue
            add("    try:")
            for index in steps:
                add(f"        V._call(backend, V.schedule.steps[{index}], values, rest, keep)")
            add("    except Exception as error:")
            add(f"        raise PartialRun(error, V._computed(values, {n})) from error")
            for index in steps:
                call = sched.steps[index]
                assert isinstance(call, Call), "a group that is not compiled holds eager calls"
                for buf in call.outs:
                    names[buf] = f"values[{buf}]"
        skipped = {k for k, i in self.donated if held is not None and i in held}
        outs = []
        for k, (buf, view) in enumerate(sched.outputs):
            if k in skipped:
                continue  # written into a held array: the caller holds it
            base = names.get(buf)
            if base is None:  # an arena buffer cannot be returned: the memory plan makes outputs fresh
                raise AssertionError(f"output {k} lives in the arena")
            shape = fresh_shape.get(buf, buffers[buf].shape)
            dense = view.offset == 0 and view.size == size_of(shape) and view.is_contiguous()
            if dense and view.shape == shape and buffers[buf].kind not in ("input", "call", "const"):
                outs.append(base)
            else:
                env[f"view{k}"] = view
                outs.append(f"V._view({base}, view{k})")
        add(f"    return [{', '.join(outs)}]")
        if held is not None:  # the body inside the lock's try
            lines[start:] = ["    " + line for line in lines[start:]]
            add("    finally:")
            add("        LOCK.release()")
        code = "\n".join(lines)
        exec(code, env)  # code generated above from this variant's tables
        return code, env[fn_name]

    def held_runner(self, binding: Binding) -> Any:
        """The runner of ``binding``'s runs (see :meth:`LLVMPlan.bind`):
        ``runner(backend, inputs, scalars, miss=True)``, which holds the plan's lock and,
        when the scalars fail this variant's guards, hands the run to ``binding``
        (``miss``) or returns ``None``."""
        held = {k: n for n, k in enumerate(binding.positions)}
        return self._runner_code(f"run_held{next(_PLAN_IDS)}", held, binding)[1]

    def _hold(self, binding: Binding) -> None:
        """Installs a binding's arrays in the pointer table (and forgets what the plain
        runner bound there)."""
        for k, array_ in zip(binding.positions, binding.arrays):
            slot, _ = self._input_slots[k]
            if slot >= 0:
                self._ptrs[slot] = _HANDLE(array_)
            self._env[f"l{k}"] = _unbound
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
        self._env[f"l{k}"] = weakref.ref(a) if direct else _unbound
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


#: Arrays kept per returned buffer for reuse (see :func:`_recycle`).
POOL = 4


def _recycle(pool: list[np.ndarray], shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A fresh array for a returned value: one this buffer returned before that
    nothing references any more (its only references are ``pool``'s and this call's:
    no tensor, view or base holds it), else a new one. Reusing memory spares the page
    faults of a new large allocation on every run (a training step returns every
    parameter and moment) and never overwrites a value still in use."""
    for i in range(len(pool)):
        if sys.getrefcount(pool[i]) == 2:
            return pool[i]
    array_ = np.empty(shape, dtype)
    if len(pool) < POOL:
        pool.append(array_)
    else:
        pool[len(pool) - 1] = array_
    return array_


def _strided(flat: np.ndarray, view: View) -> np.ndarray:
    """``view`` over the dense rank-1 array ``flat``."""
    if view.size == 0:
        return np.empty(view.shape, flat.dtype)
    item = flat.dtype.itemsize
    return np.ndarray(
        view.shape, flat.dtype, buffer=flat, offset=view.offset * item, strides=tuple(s * item for s in view.strides)
    )
